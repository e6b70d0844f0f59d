"""After the cheap power refill a waiting job has the reason *kind* deciding again gives
(:mod:`tessera.sched.core.refill_reasons`).

The simulator decides again when a ``FRAGMENTATION`` job's locality wait runs out and books
waiting time by kind, so a kind kept from before the refill changes what happens next: a
4-GPU LAS gang stayed ``CAPACITY`` ("K80 3 free") after the held job's K80 was freed, where
deciding again says ``FRAGMENTATION`` (4 free, 3 on one node), and it got no wake-up at the
end of its locality wait. The random rounds here add what ``test_power_refill``'s lack: a
locality wait, mixed gangs, 8-GPU gangs and bigger clusters.
"""

from __future__ import annotations

import random

import pytest

from tessera.model.cluster import parse_compact
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core import power_refill
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.power_refill import fast_held
from tessera.sched.core.reasons import PendingKind
from tessera.sched.core.snapshot import JobView, Snapshot
from tests.sched.test_power_refill import MODEL, _same

CLUSTERS = ("v100:8,p100:8,k80:8", "v100:4,k80:12", "v100:16,p100:8,k80:16")


def _round(seed: int, waiting_max: int = 6, busy: float = 0.6
           ) -> tuple[Snapshot, PlacementOptions]:
    """A random round: 4-GPU nodes, running gangs (some near their end), 3..``waiting_max``
    waiting jobs of 1-8 GPUs, a budget of 50-95 % of the all-busy draw, a locality wait of
    0 or 600 s and mixed gangs in 30 % of rounds."""
    rng = random.Random(seed)
    table = default_throughputs()
    cluster = parse_compact(rng.choice(CLUSTERS), 4)
    free = FreeGpus.of_snapshot(Snapshot(0.0, cluster, ()))
    flavors = list(free.flavors())
    single, multi = table.job_types(), table.distributable_types()
    views: list[JobView] = []
    used = 0
    for i in range(60):
        g = rng.choice([1, 1, 1, 2, 4])
        spec = JobSpec(JobId(f"r{i}"), rng.choice(single if g == 1 else multi), g, 1e5, 0.0)
        p = free.find(rng.choice(flavors), g, False)
        if p is None or used + g > busy * cluster.total_gpus:
            continue
        free.take(p)
        used += g
        rng.uniform(0, 5e4)  # (kept: the rounds found by the review are drawn with it)
        views.append(JobView(spec, JobState.RUNNING, rng.choice([50.0, 500.0, 5e3, 5e4]), p,
                             as_of_s=0.0, progress_from_s=0.0))
    for k in range(rng.randint(3, waiting_max)):
        g = rng.choice([1, 1, 1, 2, 4, 8])
        spec = JobSpec(JobId(str(k)), rng.choice(single if g == 1 else multi), g,
                       rng.choice([1e3, 1e4, 1e5]), 1.0 + k)
        views.append(JobView(spec, JobState.PENDING, spec.total_steps,
                             pending_since_s=spec.submit_time_s))
    full_w = sum(n.gpus * MODEL.estimate("", None, n.flavor).avg_power_w
                 for n in cluster.nodes)
    budget = PowerBudget(rng.uniform(0.5, 0.95) * full_w, MODEL, wait_for_fast=True)
    opts = PlacementOptions(power_budget=budget, locality_wait_s=rng.choice([0.0, 0.0, 600.0]),
                            mixed_gangs=rng.random() < 0.3)
    return Snapshot(20.0, cluster, tuple(views)), opts


def _decide(snap: Snapshot, policy: str, opts: PlacementOptions) -> Decision:
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), snap.cluster),
                          random.Random(0))
    return decide(snap, make_policy(policy), ctx, opts)


def _both(monkeypatch: pytest.MonkeyPatch, seed: int, policy: str) -> tuple[Decision, Decision]:
    snap, opts = _round(seed)
    cheap = _decide(snap, policy, opts)
    with monkeypatch.context() as m:
        m.setattr(power_refill, "_modelled", lambda *_a: False)
        full = _decide(snap, policy, opts)
    return cheap, full


def test_a_gang_left_fragmented_by_the_refill_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    cheap, full = _both(monkeypatch, 2068, "las")
    assert fast_held(cheap.pending) == {JobId("2")}
    assert full.pending[JobId("3")].kind is PendingKind.FRAGMENTATION
    assert cheap.pending[JobId("3")].kind is PendingKind.FRAGMENTATION  # (was CAPACITY)
    _same(cheap, full)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["fifo", "las", "srtf"])
def test_the_cheap_refill_equals_deciding_again_with_locality_waits(
        monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    """A bigger sample than ``test_power_refill``'s (600 rounds; about 40 % hold a job)."""
    holds = 0
    for seed in range(600):
        cheap, full = _both(monkeypatch, seed, policy)
        _same(cheap, full)
        holds += bool(fast_held(cheap.pending))
    assert holds >= 150
