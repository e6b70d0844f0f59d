"""Time pending adds up: start wait, every pending spell, and its reasons (awaiting decision
included), on hand-built runs whose waits are known to the second."""

from __future__ import annotations

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import JobRecord
from tests.builders import RESNET, make_cluster, make_job, make_workload

V100 = default_throughputs().throughput(RESNET, resolve_flavor("v100"))
ROUNDS = SimConfig(scheduler=SchedulerSettings(mode="rounds", round_s=360.0, checkpoint_s=0,
                                               restore_s=0))


def _explained(j: JobRecord) -> float:
    return j.wait_quota_s + j.wait_capacity_s + j.wait_fragmentation_s + j.wait_decision_s


def test_a_job_arriving_between_rounds_awaits_the_next_decision() -> None:
    # a arrives on an idle cluster: a round at once. b arrives 10 s later, with a GPU free, and
    # waits for the round at 360 s: no decision gave it a reason before that.
    c = make_cluster().node("v100", gpus=2).build()
    w = make_workload(make_job("a", steps=V100 * 3000), make_job("b", steps=V100 * 60,
                                                                  submit_s=10))
    r = simulate(w, c, "fifo", ROUNDS)
    b = {j.job_id: j for j in r.jobs}["b"]
    assert b.queue_delay_s == pytest.approx(350.0)
    assert b.pending_s == pytest.approx(350.0)
    assert b.wait_decision_s == pytest.approx(350.0)
    assert b.wait_capacity_s == 0
    assert r.summary.wait_decision_h == pytest.approx(350.0 / 3600)
    assert r.as_dict()["wait_decision_s_mean"] == pytest.approx(175.0)


def test_a_preemptive_policy_starts_at_once_and_waits_later() -> None:
    # las starts each new job at once by preempting the one with more service: start waits are
    # 0, but the preempted job is pending afterwards, and the reasons cover it exactly.
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("a", steps=V100 * 5000),
                      make_job("b", steps=V100 * 600, submit_s=4000))
    r = simulate(w, c, "las", SimConfig(scheduler=SchedulerSettings(checkpoint_s=0,
                                                                    restore_s=0)))
    a = {j.job_id: j for j in r.jobs}["a"]
    assert r.summary.avg_queue_delay_s == 0
    assert a.preemptions == 1 and a.pending_s == pytest.approx(600.0)
    assert a.wait_capacity_s == pytest.approx(600.0) and a.wait_decision_s == 0


@pytest.mark.parametrize("policy", ["fifo", "las", "max_min_fairness", "hetero_srpt"])
def test_the_reasons_add_up_to_the_time_pending(policy: str) -> None:
    c = make_cluster().node("v100", gpus=2).node("k80", gpus=2).build()
    jobs = [make_job(f"j{i}", gpus=1 + i % 2, steps=V100 * (300 + 200 * i), submit_s=97.0 * i)
            for i in range(12)]
    r = simulate(make_workload(*jobs), c, policy)
    for j in r.jobs:
        assert j.pending_s == pytest.approx(_explained(j), abs=1e-6)
        assert j.queue_delay_s is not None and j.queue_delay_s <= j.pending_s + 1e-6
    s = r.summary
    assert s.pending_h == pytest.approx(
        s.wait_quota_h + s.wait_capacity_h + s.wait_fragmentation_h + s.wait_decision_h)
