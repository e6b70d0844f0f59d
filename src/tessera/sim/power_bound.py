"""A lower bound on the average JCT any scheduler can reach under a cluster power budget.

The power-budget goal (``docs/energy.md``, "Power budget") asks for an average JCT within
10 % of the uncapped run. Whether that is reachable at all depends on the power model: a
budget caps how much work the cluster can do per second, whoever schedules it. This module
bounds it from below under the same :class:`~tessera.perf.power.PowerModel` the simulator
uses.

**Two resources.** At every instant a schedule under ``B`` watts uses at most ``N`` GPUs
and at most ``B - P_idle`` watts *above idle* (``P_idle``: every GPU idle; a busy GPU of
flavor ``f`` at limit ``L`` adds ``draw(L) - idle(f)``). A job run in some configuration
(flavor ``f``, limit ``L``; its gang of ``k`` GPUs for ``t(f, L) = steps / tput(f, k) ·
factor(L)`` seconds) uses ``k · t`` GPU-seconds and ``k · t · (draw - idle)`` joules above
idle. For any weight ``λ`` in [0, 1] give each job the size

    ``s_j(λ) = min over (f, L) of λ · k·t / N + (1 - λ) · k·t·(draw - idle) / (B - P_idle)``

(linear in the share of the job run in each configuration, so no mix of configurations
does better). The cluster then processes at most ``λ + (1 - λ) = 1`` unit of size per
second, whatever it runs: every schedule under the budget is a schedule of one machine of
rate 1 on these sizes. On one preemptive machine shortest-remaining-size-first (SRPT)
minimises the sum of completion times, so SRPT's sum is a lower bound for each ``λ``; the
bound is the best over a grid of ``λ``. Each job also finishes no sooner than its
submission plus its run on its fastest flavor uncapped; the bound is the larger of the two
(:func:`jct_lower_bound`).

The relaxation lets one job use the whole cluster and ignores gangs and placement, so it
is loose where few jobs queue; against a policy's uncapped JCT it says whether *some*
scheduler could still meet the goal (a ratio above 1.10 proves it unreachable under the
model), not whether a budget stage that keeps the policy's order can.

:func:`binding_fraction` reads an uncapped run's power series: the share of the run during
which the cluster drew more than ``B`` (where any budget stage must slow or hold work).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec
from tessera.perf.power import PowerModel
from tessera.perf.profiles import ThroughputTable

__all__ = ["LAMBDAS", "JctBound", "binding_fraction", "jct_lower_bound", "srpt_sum_s"]

LAMBDAS = tuple(i / 20 for i in range(21))
"""The weights ``λ`` the bound tries (each gives a valid bound; the best is kept)."""

_Config = tuple[float, float]  # (GPU-seconds, joules above idle) of one whole run


@dataclass(frozen=True, slots=True)
class JctBound:
    """The bound of one (workload, cluster, budget).

    Attributes:
        avg_jct_s: the lower bound on the average JCT under the budget, seconds.
        lam: the weight ``λ`` that gave it (1.0: GPUs, not power, bind).
    """

    avg_jct_s: float
    lam: float


def srpt_sum_s(jobs: Sequence[tuple[float, float]], rate: float = 1.0) -> float:
    """Sum of completion times of (release s, size) on one preemptive machine doing
    ``rate`` size per second, shortest remaining size first (optimal for the sum)."""
    if not rate > 0:
        raise SpecError(f"SRPT bound: the machine's rate must be > 0, got {rate}")
    order = sorted(jobs)
    heap: list[float] = []
    now, total, i = 0.0, 0.0, 0
    while i < len(order) or heap:
        if not heap:
            now = max(now, order[i][0])
        while i < len(order) and order[i][0] <= now:
            heapq.heappush(heap, order[i][1])
            i += 1
        nxt = order[i][0] if i < len(order) else float("inf")
        w = heapq.heappop(heap)
        if now + w / rate <= nxt:
            now += w / rate
            total += now
        else:
            heapq.heappush(heap, w - (nxt - now) * rate)
            now = nxt
    return total


def _tput(table: ThroughputTable, job_type: str, flavor: GpuFlavor, k: int) -> float:
    try:
        return table.throughput(job_type, flavor, k)
    except SpecError:  # NoProfileError: the job cannot run there
        return 0.0


def _configs(job: JobSpec, flavors: Sequence[GpuFlavor], model: PowerModel,
             table: ThroughputTable) -> tuple[list[_Config], float]:
    """Every (flavor, limit) run of ``job`` as (GPU-s, J above idle), and its fastest run."""
    out: list[_Config] = []
    fastest_s = float("inf")
    for f in flavors:
        tput = _tput(table, job.job_type, f, job.num_gpus)
        if tput <= 0:
            continue
        base_s = job.total_steps / tput
        fastest_s = min(fastest_s, base_s)
        idle_w = model.idle_power_w(f)
        for lim in model.limit_range(f).limits_w():
            e = model.estimate(job.job_type, job.model, f, lim)
            gpu_s = job.num_gpus * base_s * e.step_time_factor
            out.append((gpu_s, gpu_s * max(0.0, e.avg_power_w - idle_w)))
    if not out:
        raise SpecError(f"job {job.job_id}: {job.job_type} runs on no flavor of the cluster")
    return out, fastest_s


def jct_lower_bound(jobs: Sequence[JobSpec], cluster: ClusterSpec, model: PowerModel,
                    table: ThroughputTable, budget_w: float | None) -> JctBound:
    """The bound of the module docstring for ``jobs`` on ``cluster`` under ``budget_w``
    watts (``None``: no budget, GPUs alone bind).

    Raises:
        SpecError: no jobs, the budget is at or below the idle cluster's draw, or a job runs
            on no flavor of the cluster.
    """
    if not jobs:
        raise SpecError("a JCT bound needs at least one job (the average of none is undefined)")
    n_gpus = 0
    idle_w = 0.0
    flavors: dict[GpuFlavor, None] = {}
    for n in cluster.nodes:
        n_gpus += n.gpus
        idle_w += n.gpus * model.idle_power_w(n.flavor)
        flavors[n.flavor] = None
    if budget_w is not None and budget_w <= idle_w:
        raise SpecError(f"power budget {budget_w:g} W is at or below the idle cluster's "
                        f"{idle_w:g} W")
    head_w = None if budget_w is None else budget_w - idle_w
    runs = [_configs(j, tuple(flavors), model, table) for j in jobs]
    submit = sum(j.submit_time_s for j in jobs)
    alone = submit + sum(fast for _c, fast in runs)
    best, best_lam = alone, 1.0
    for lam in (1.0,) if head_w is None else LAMBDAS:
        sizes = []
        for j, (configs, _fast) in zip(jobs, runs, strict=True):
            size = min(lam * g / n_gpus + (0.0 if head_w is None else (1 - lam) * e / head_w)
                       for g, e in configs)
            sizes.append((j.submit_time_s, size))
        total = srpt_sum_s(sizes)
        if total > best:
            best, best_lam = total, lam
    return JctBound((best - submit) / len(jobs), best_lam)


def binding_fraction(times_s: Sequence[float], power_w: Sequence[float], end_s: float,
                     budget_w: float) -> float:
    """Share of ``[times_s[0], end_s]`` during which the step function ``power_w`` (from
    ``times_s[i]``) exceeds ``budget_w``."""
    if not times_s or end_s <= times_s[0]:
        return 0.0
    over = 0.0
    for i, (t, p) in enumerate(zip(times_s, power_w, strict=True)):
        t_next = times_s[i + 1] if i + 1 < len(times_s) else end_s
        if p > budget_w:
            over += max(0.0, min(t_next, end_s) - t)
    return over / (end_s - times_s[0])
