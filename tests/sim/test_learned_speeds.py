"""``--speeds learned`` (issue 35 part 1): policies read estimates, the table drives progress."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tessera.model.gpus import resolve_flavor
from tessera.perf.model_shape import measured_prior
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.learned import LearnedOracle, ObservedOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import RECO, RESNET, make_cluster, make_job, make_workload

T = default_throughputs()
V100, K80 = resolve_flavor("v100"), resolve_flavor("k80")
CLUSTER = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()


def _oracles() -> tuple[ObservedOracle, LearnedOracle]:
    truth = ObservedOracle(T, CLUSTER)
    return truth, LearnedOracle(truth)


def test_before_it_runs_a_job_is_seen_through_the_other_job_types() -> None:
    _truth, learned = _oracles()
    job = make_job("a", job_type=RECO)
    prior = measured_prior(T, RECO)  # (its model's other batch sizes, measured cells)
    seen = {r.flavor: r.consolidated for r in learned.rates(job)}
    assert seen[V100] == pytest.approx(prior["V100-16GB"])
    assert seen[K80] == pytest.approx(prior["K80"])
    # the table says Recommendation is 1.5x faster on a K80 than on a V100: the estimate
    # (interpolated between batch sizes 512 and 2048) learns it, it is not read
    assert T.throughput(RECO, V100) != pytest.approx(seen[V100])
    assert seen[K80] > 1.3 * seen[V100]
    assert learned.real_rates(job) == _truth.real_rates(job)


def test_a_run_makes_its_flavor_known_and_shifts_the_rest() -> None:
    truth, learned = _oracles()
    job = make_job("a", job_type=RESNET)
    prior = learned.rate(job, K80, True)
    true_v100 = truth.rate(job, V100, True)  # the simulator advancing the job on a V100
    assert learned.rate(job, V100, True) == pytest.approx(true_v100)
    after = learned.rate(job, K80, True)
    assert after != pytest.approx(prior)
    assert learned.fastest_first(job)[0] == V100
    other = make_job("b", job_type=RESNET)  # the same type, never run: still the prior
    assert learned.rate(other, K80, True) == pytest.approx(prior)


def test_learned_run_is_driven_by_the_truth_and_says_how_wrong_it_was() -> None:
    one_flavor = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("a", steps=T.throughput(RESNET, V100) * 1000),
                      make_job("b", job_type=RECO, steps=T.throughput(RECO, V100) * 500,
                               submit_s=10))
    cfg = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events"))
    table = simulate(w, one_flavor, "fifo", cfg)
    learned = simulate(w, one_flavor, "fifo", cfg.model_copy(update={"speeds": "learned"}))
    assert [j.jct_s for j in learned.jobs] == pytest.approx([j.jct_s for j in table.jobs])
    assert [j.jct_s for j in learned.jobs] == pytest.approx([1000.0, 1490.0])
    assert any(n.startswith("--speeds learned: mean |estimate/true - 1|") for n in learned.notes)
    assert not any("learned" in n for n in table.notes)


def test_hetero_policy_finishes_every_job_with_learned_speeds() -> None:
    w = make_workload(*(make_job(f"j{i}", job_type=(RESNET, RECO)[i % 2], steps=2000,
                                 submit_s=30 * i) for i in range(8)))
    r = simulate(w, CLUSTER, "hetero_srpt", SimConfig(speeds="learned"))
    assert r.summary.succeeded == 8


def test_an_unknown_speeds_value_is_refused() -> None:
    with pytest.raises(ValidationError, match="speeds"):
        SimConfig(speeds="guessed")  # type: ignore[arg-type]


def test_an_unknown_goodput_value_is_refused() -> None:
    with pytest.raises(ValidationError, match="goodput"):
        SimConfig(goodput="guessed")  # type: ignore[arg-type]
