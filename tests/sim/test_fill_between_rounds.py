"""Work-conserving rounds: waiting jobs take idle GPUs between two rounds, nobody is moved."""

from __future__ import annotations

import random

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import PlacementOptions, decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Placement
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import make_cluster, make_job, make_workload, snapshot, view

_V100_16GB = resolve_flavor("V100-16GB")


@pytest.mark.parametrize("policy", ["hetero_srpt", "max_min_fairness"])
def test_a_job_arriving_mid_round_starts_at_once_into_idle_gpus(policy: str) -> None:
    c = make_cluster().node("v100", gpus=1, count=2).build()
    w = make_workload(make_job("first", 1, steps=1e6), make_job("late", 1, steps=100,
                                                               submit_s=100))
    waited = simulate(w, c, policy, SimConfig())
    filled = simulate(w, c, policy, SimConfig(
        scheduler=SchedulerSettings(fill_between_rounds=True)))
    late = {r.job_id: r for r in filled.jobs}["late"]
    assert late.queue_delay_s == pytest.approx(0.0)
    assert {r.job_id: r for r in waited.jobs}["late"].queue_delay_s == pytest.approx(260.0)


def test_fill_only_never_stops_or_moves_a_running_job() -> None:
    # A round of max-min fairness would time-share the one GPU between the two jobs; a fill
    # step keeps the running one and leaves the newcomer waiting.
    c = make_cluster().node("v100", gpus=1).build()
    running = view(make_job("old", 1, steps=1e9), JobState.RUNNING,
                   Placement.of(_V100_16GB, (("v100-16gb-0000", 1),)), progress_rate=1.0)
    new = view(make_job("new", 1, steps=10, submit_s=5))
    oracle = ThroughputOracle(default_throughputs(), c)
    d = decide(snapshot(c, running, new, now_s=10), make_policy("hetero_srpt"),
               DecisionContext(oracle, random.Random(0)), PlacementOptions(fill_only=True))
    assert "old" in d.placements and not d.preempted and "new" not in d.placements
