"""Run several policies over the same inputs, in parallel processes when that helps.

Each run is independent and deterministic (its own seeded RNGs), so running them in separate
processes gives exactly the results of running them one after another. Progress is reported
through a queue as ``(policy, jobs_done, jobs_total, simulated_s)``.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from queue import Empty
from typing import Any

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import Workload
from tessera.perf.profiles import ThroughputTable
from tessera.sched.catalog import make_policy
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import SimResult

ProgressSink = Callable[[str, int, int, float], None]
"""``progress(policy, jobs_done, jobs_total, simulated_s)``."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Inputs shared by every policy of a batch.

    ``elastic_workload``, when given, is the same jobs as elastic policies run them (e.g. Sia's
    adaptive jobs tuning their batch from their model's ``M0``,
    :func:`tessera.workload.elastic.tuned_from_m0`), while rigid policies run ``workload``:
    a rigid job keeps the trace's batch, so one workload cannot serve both.
    """

    workload: Workload
    cluster: ClusterSpec
    config: SimConfig
    table: ThroughputTable
    elastic_workload: Workload | None = None

    def workload_for(self, policy: str) -> Workload:
        """The workload ``policy`` runs (see the class docstring)."""
        if self.elastic_workload is not None and make_policy(policy).elastic:
            return self.elastic_workload
        return self.workload


def _throttled(
    policy: str, put: Callable[[tuple[str, int, int, float]], Any]
) -> Callable[[int, int, float], None]:
    last = [-1]

    def report(done: int, total: int, simulated_s: float) -> None:
        step = max(total // 200, 1)
        if done == total or done - last[0] >= step:
            last[0] = done
            put((policy, done, total, simulated_s))

    return report


def _run_one(spec: RunSpec, policy: str, queue: Any) -> SimResult:
    return simulate(
        spec.workload_for(policy), spec.cluster, policy, spec.config, spec.table,
        progress=_throttled(policy, queue.put) if queue is not None else None,
    )


def run_policies(
    spec: RunSpec,
    policies: Sequence[str],
    workers: int = 1,
    progress: ProgressSink | None = None,
) -> list[SimResult]:
    """Simulate every policy; results come back in the order of ``policies``."""
    if workers <= 1 or len(policies) <= 1:
        out = []
        for p in policies:
            sink = (lambda msg: progress(*msg)) if progress else None
            out.append(
                simulate(spec.workload_for(p), spec.cluster, p, spec.config, spec.table,
                         progress=_throttled(p, sink) if sink else None)
            )
        return out
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        queue = manager.Queue()
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(_run_one, spec, p, queue) for p in policies]
            while not all(f.done() for f in futures):
                _drain(queue, progress, timeout=0.2)
            _drain(queue, progress, timeout=0.0)
            return [f.result() for f in futures]


def _drain(queue: Any, progress: ProgressSink | None, timeout: float) -> None:
    try:
        item = queue.get(timeout=timeout) if timeout else queue.get_nowait()
    except Empty:
        return
    while True:
        if progress is not None:
            progress(*item)
        try:
            item = queue.get_nowait()
        except Empty:
            return
