"""The simulator's switches in combination, with the invariants checked at every start.

A user can combine the cadence, fill steps, mixed gangs, the locality wait, two failure models,
pre-run validation, quotas and Gavel compatibility. Testing every combination is 1,152 runs
per policy; instead :data:`ROWS` is a *pairwise* covering table (every value of every switch
meets every value of every other switch in at least one row, checked by
:func:`test_rows_cover_every_pair`). Each row runs under four policies of different shapes
(ordering, preemptive ordering, allocation LP, our hetero SRPT) and must:

* never over-allocate a node, nor put a queue above its quota plus borrowing limit, at any
  start (checked inside the run);
* finish every job or account for it (rejected, failed, unfinished), with legal lifecycle
  transitions (an illegal one raises);
* give the same result twice with the same seed.

The first two rows (all off; nearly all on, under Gavel compatibility) run in the default
suite, the rest with the slow tests.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from tessera.model.jobs import JobState
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import FailureConfig, QuotaConfig, SimConfig, ValidationConfig
from tessera.sim.engine import simulate
from tessera.sim.world import SimWorld
from tessera.workload.synth import generate_gavel_like
from tests.builders import make_cluster, make_workload

SWITCHES: dict[str, tuple[Any, ...]] = {
    "mode": ("auto", "rounds", "events"),
    "fill": (False, True),
    "mixed": (False, True),
    "locality_wait_s": (0.0, 1800.0),
    "failures": ("off", "uniform", "early-late"),
    "validation": (False, True),
    "quotas": ("none", "demand"),
    "compat": (None, "gavel"),
}

ROWS: list[dict[str, Any]] = [
    dict(mode="auto", fill=False, mixed=False, locality_wait_s=0.0, failures="off",
         validation=False, quotas="none", compat=None),
    dict(mode="auto", fill=True, mixed=True, locality_wait_s=1800.0, failures="uniform",
         validation=True, quotas="demand", compat="gavel"),
    dict(mode="auto", fill=False, mixed=True, locality_wait_s=1800.0, failures="early-late",
         validation=False, quotas="none", compat=None),
    dict(mode="rounds", fill=False, mixed=True, locality_wait_s=0.0, failures="uniform",
         validation=False, quotas="demand", compat=None),
    dict(mode="rounds", fill=True, mixed=False, locality_wait_s=1800.0, failures="off",
         validation=True, quotas="none", compat=None),
    dict(mode="rounds", fill=True, mixed=False, locality_wait_s=0.0, failures="early-late",
         validation=True, quotas="demand", compat="gavel"),
    dict(mode="events", fill=True, mixed=False, locality_wait_s=0.0, failures="uniform",
         validation=False, quotas="none", compat="gavel"),
    dict(mode="events", fill=False, mixed=True, locality_wait_s=1800.0, failures="off",
         validation=True, quotas="demand", compat="gavel"),
    dict(mode="events", fill=True, mixed=True, locality_wait_s=1800.0, failures="early-late",
         validation=True, quotas="demand", compat=None),
    dict(mode="auto", fill=True, mixed=False, locality_wait_s=1800.0, failures="off",
         validation=False, quotas="demand", compat=None),
    dict(mode="rounds", fill=False, mixed=True, locality_wait_s=1800.0, failures="uniform",
         validation=True, quotas="none", compat="gavel"),
    dict(mode="events", fill=False, mixed=False, locality_wait_s=0.0, failures="early-late",
         validation=False, quotas="none", compat="gavel"),
    dict(mode="auto", fill=False, mixed=False, locality_wait_s=0.0, failures="uniform",
         validation=True, quotas="none", compat=None),
    dict(mode="events", fill=False, mixed=False, locality_wait_s=1800.0, failures="uniform",
         validation=False, quotas="demand", compat=None),
]

POLICIES = ("fifo", "las", "max_min_fairness", "hetero_srpt")


def config_of(row: dict[str, Any], seed: int = 3) -> SimConfig:
    """The simulator settings a row selects."""
    failures = FailureConfig() if row["failures"] == "off" else FailureConfig(
        job_failure_rate=0.4, time_model=row["failures"], retry_delay_s=30.0)
    return SimConfig(
        scheduler=SchedulerSettings(mode=row["mode"], fill_between_rounds=row["fill"],
                                    mixed_gangs=row["mixed"],
                                    locality_wait_s=row["locality_wait_s"]),
        failures=failures,
        validation=ValidationConfig(min_gpus=4 if row["validation"] else 0),
        quotas=QuotaConfig(split=row["quotas"]),
        compat=row["compat"],
        compat_solver="highs",
        seed=seed,
    )


def _cluster():  # type: ignore[no-untyped-def]
    return (make_cluster().node("v100", gpus=4, count=2).node("p100", gpus=4, count=2)
            .node("k80", gpus=4, count=2).build())


def _workload():  # type: ignore[no-untyped-def]
    w = generate_gavel_like(36, 6.0, 11)
    return make_workload(*(replace(j, queue=f"team-{i % 3}") for i, j in enumerate(w.jobs)))


def test_rows_cover_every_pair() -> None:
    for (a, va), (b, vb) in itertools.combinations(SWITCHES.items(), 2):
        for x, y in itertools.product(va, vb):
            assert any(r[a] == x and r[b] == y for r in ROWS), f"no row has {a}={x}, {b}={y}"
    assert all(set(r) == set(SWITCHES) for r in ROWS)


@pytest.fixture
def checked_starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Check the world's books after every start (and count the starts)."""
    starts: list[int] = []
    original = SimWorld.start

    def start(self: SimWorld, job: Any, p: Any, t: float) -> None:
        original(self, job, p, t)
        starts.append(1)
        capacity = {n.node_id: n.gpus for n in self.cluster.nodes}
        assert all(0 <= f <= capacity[n] for n, f in self.free.items()), "node over-allocated"
        held = sum(j.spec.num_gpus for j in self.running.values())
        assert held == sum(capacity.values()) - sum(self.free.values())
        by_queue: dict[str, int] = {}
        for j in self.running.values():
            by_queue[j.spec.queue] = by_queue.get(j.spec.queue, 0) + j.spec.num_gpus
        for name, q in self.quotas.items():
            limit = q.nominal_gpus + (q.borrowing_limit_gpus if q.borrowing_limit_gpus
                                      is not None else 1 << 30)
            assert by_queue.get(name, 0) <= limit, f"queue {name} above its quota"
        assert job.state is JobState.RUNNING

    monkeypatch.setattr(SimWorld, "start", start)
    return starts


@pytest.mark.parametrize("row", [
    pytest.param(i, marks=() if i < 2 else pytest.mark.slow) for i in range(len(ROWS))])
def test_combination_keeps_the_invariants(row: int, checked_starts: list[int]) -> None:
    cfg = config_of(ROWS[row])
    w, c = _workload(), _cluster()
    for policy in POLICIES:
        a = simulate(w, c, policy, cfg)
        b = simulate(w, c, policy, cfg)
        s = a.summary
        assert s.succeeded + s.failed + s.rejected + s.unfinished == s.jobs == len(w)
        assert s.succeeded > 0, (policy, ROWS[row])
        assert a.jobs == b.jobs and a.summary == b.summary, (policy, ROWS[row])
    if ROWS[row]["compat"] is None:
        assert checked_starts, "the invariants were never checked"
