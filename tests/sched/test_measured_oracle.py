"""The oracle's overlay of measured rates (issue 35 part 4): a job's own, no one else's."""

from __future__ import annotations

import pytest

from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId, JobSpec
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.oracle import ThroughputOracle

V100, K80 = resolve_flavor("v100"), resolve_flavor("k80")


def _job(jid: str, job_type: str = "command") -> JobSpec:
    return JobSpec(job_id=JobId(jid), job_type=job_type, num_gpus=1, total_steps=1000.0,
                   submit_time_s=0.0)


def _oracle() -> ThroughputOracle:
    return ThroughputOracle(default_throughputs(), load_cluster("v100:4,k80:4", 4),
                            unprofiled_uniform=True)


def test_a_measured_job_runs_at_its_measurements_and_its_twin_does_not() -> None:
    o = _oracle()
    a, b = _job("j-a"), _job("j-b")   # no job_type in any table: a prior of 1 step/s
    assert o.rate(a, V100, True) == 1.0 and o.fastest_first(a) == o.fastest_first(b)
    o.set_measured("j-a", {K80: 12.0})
    assert o.rate(a, K80, True) == 12.0
    # the unmeasured flavor keeps the prior's ratio at the measurements' level
    assert o.rate(a, V100, True) == pytest.approx(12.0)
    assert o.rate(b, K80, True) == 1.0 and o.best_rate(b) == 1.0   # another job: unchanged
    o.set_measured("j-a", {K80: 12.0, V100: 30.0})
    assert o.fastest_first(a)[0] == V100 and o.best_rate(a) == 30.0
    assert o.key(a) != o.key(b)
    o.set_measured("j-a", None)
    assert o.rate(a, V100, True) == 1.0 and o.key(a) == o.key(b)


def test_a_profiled_job_keeps_its_priors_ratios_between_flavors() -> None:
    o = _oracle()
    job = _job("j-r", "ResNet-18 (batch size 16)")
    prior_v, prior_k = o.rate(job, V100, True), o.rate(job, K80, True)
    assert prior_v > prior_k > 0
    o.set_measured("j-r", {K80: prior_k * 0.5})
    assert o.rate(job, V100, True) == pytest.approx(prior_v * 0.5)
    assert o.as_agnostic().rate(job, K80, True) == pytest.approx(prior_k * 0.5)
