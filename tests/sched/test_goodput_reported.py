"""Issue 35 part 5: Sia and Pollux value a job by the noise scale it reports (Pollux's agent)."""

from __future__ import annotations

import pytest

from tessera.model.jobs import JobState
from tessera.sched.core.snapshot import Placement
from tessera.sched.elastic.goodput import GoodputModel
from tessera.sched.elastic.policy import ElasticMemory
from tessera.workload.elastic import elastic_range
from tests.builders import make_job, view
from tests.sched.test_elastic_policies import _A100_40GB, TYPE, _cluster, _rank


def _decide(policy: str, gns: float | None):  # type: ignore[no-untyped-def]
    spec = make_job("a", 1, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    held = Placement.of(_A100_40GB, ((_cluster().nodes[1].node_id, 2),),
                        global_batch_samples=2048)
    v = view(spec, JobState.RUNNING, held, as_of_s=4000.0, noise_scale_samples=gns)
    return _rank(policy, [v], now_s=4000.0,
                 state=ElasticMemory(largest_run={spec.job_id: 8})).sizes["a"]


@pytest.mark.parametrize("policy", ["sia", "pollux"])
def test_the_decision_follows_the_reported_noise_scale(policy: str) -> None:
    low, high = _decide(policy, 100.0), _decide(policy, 1e6)
    # a small noise scale: a larger batch is worth little, the job keeps its batch; a large
    # one: nearly every sample counts, the job takes a larger batch
    assert low.global_batch_samples == 2048
    assert high.global_batch_samples > low.global_batch_samples
    assert _decide(policy, None) == _decide(policy, None)  # no report: the table, unchanged


def test_a_reported_noise_scale_replaces_the_table_only_for_efficiency() -> None:
    e = elastic_range("cifar10", 1, 2048)
    model = GoodputModel()
    table = model.estimate(e, _A100_40GB, (4,), 0.0)
    flat = model.estimate(e, _A100_40GB, (4,), 0.0, gns=0.0)
    assert table is not None and flat is not None
    # gns 0: efficiency M0/M, so the best batch is the smallest one allowed
    assert flat.efficiency == pytest.approx(e.initial_batch_samples
                                            / flat.config.global_batch_samples)
    assert flat.config.global_batch_samples == e.initial_batch_samples
    # cached per quantized value: 1234.4 and 1234.0 are the same estimate object
    a = model.estimate(e, _A100_40GB, (4,), 0.0, gns=1234.4)
    assert a is model.estimate(e, _A100_40GB, (4,), 0.0, gns=1234.0)


def test_fitted_step_times_replace_the_profile_on_their_flavor_only() -> None:
    """A job whose fit says the flavor the policy picks is far slower than measured is moved
    to the other one."""
    from tessera.perf.goodput_fit import ThroughputParams
    from tests.sched.test_elastic_policies import _T4

    e = elastic_range("cifar10", 1, 2048)
    model = GoodputModel()
    measured = model.estimate(e, _A100_40GB, (1,), 0.0)
    slow = ThroughputParams(10.0, 0.001)
    fitted = model.estimate(e, _A100_40GB, (1,), 0.0, fit=slow)
    assert measured is not None and fitted is not None
    assert fitted.iteration_time_s == pytest.approx(slow.iteration_s(
        1, fitted.config.local_batch_samples, fitted.config.accumulation_steps))
    assert fitted.throughput_samples_per_s < measured.throughput_samples_per_s / 5
    spec = make_job("a", 1, job_type=TYPE, elastic=e)
    for policy in ("sia",):  # (Pollux's row is type-blind: the mean over flavors)
        plain = _rank(policy, [view(spec)], now_s=600.0, explore=False)
        picked = dict(plain.candidates)["a"]
        other = _T4 if picked == _A100_40GB else _A100_40GB
        told = _rank(policy, [view(spec, step_fits=((picked, slow),))], now_s=600.0,
                     explore=False)
        assert dict(told.candidates)["a"] == other, policy
