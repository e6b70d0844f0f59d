"""The early/late failure model and pre-run validation, against hand-computed outcomes."""

from __future__ import annotations

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import FailureConfig, SimConfig, ValidationConfig
from tessera.sim.engine import simulate
from tessera.sim.failures import AttemptFailure, FailureModel
from tests.builders import RESNET, make_cluster, make_job, make_workload

T = default_throughputs()
NO_COST = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events"))


def _early(**kw: object) -> FailureConfig:
    base: dict[str, object] = {"job_failure_rate": 1.0, "repeat_probability": 0.0,
                               "time_model": "early-late", "early_share": 1.0,
                               "early_window_s": 100.0, "retry_delay_s": 0.0,
                               "checkpoint_interval_s": 1800.0}
    return FailureConfig.model_validate({**base, **kw})


def _cfg(fcfg: FailureConfig, min_gpus: int = 0, validation_s: float = 300.0) -> SimConfig:
    return NO_COST.model_copy(update={
        "failures": fcfg, "validation": ValidationConfig(min_gpus=min_gpus,
                                                         validation_s=validation_s)})


def test_model_draws_are_keyed_by_job_and_attempt() -> None:
    m = FailureModel(FailureConfig(repeat_probability=0.5, time_model="early-late"), seed=3)
    assert m.draw(7, 0) == m.draw(7, 0)
    assert FailureModel(m.cfg, seed=3).draw(7, 1) == m.draw(7, 1)
    assert all(m.draw(i, 0) is not None for i in range(200))  # the first attempt always fails


@pytest.mark.parametrize("early_share", [0.0, 0.3, 0.8, 1.0])
def test_model_shares(early_share: float) -> None:
    m = FailureModel(FailureConfig(early_share=early_share, early_window_s=600,
                                   repeat_probability=0.4), seed=0)
    first = [m.draw(i, 0) for i in range(4000)]
    early = [f for f in first if f is not None and f.early]
    assert len(early) / 4000 == pytest.approx(early_share, abs=0.03)
    assert all(0 <= f.offset_s < 600 for f in early)
    repeats = sum(m.draw(i, 1) is not None for i in range(4000)) / 4000
    assert repeats == pytest.approx(0.4, abs=0.03)


def test_attempt_failure_times() -> None:
    assert AttemptFailure(True, offset_s=50).after_s(1000) == 50
    assert AttemptFailure(True, offset_s=50).after_s(40) is None  # finishes before the bug
    assert AttemptFailure(False, fraction=0.25).after_s(1000) == 250


def _one_gang() -> tuple[object, object, float]:
    c = make_cluster().node("v100", gpus=8).build()
    rate = T.throughput(RESNET, resolve_flavor("v100"), 8)
    w = make_workload(make_job("big", gpus=8, steps=rate * 3600, max_retries=2))
    return c, w, rate


def test_validation_moves_an_early_failure_onto_one_gpu() -> None:
    c, w, _rate = _one_gang()
    plain = simulate(w, c, "fifo", _cfg(_early()))  # type: ignore[arg-type]
    valid = simulate(w, c, "fifo", _cfg(_early(), min_gpus=8))  # type: ignore[arg-type]
    lost_plain = plain.summary.gpu_hours_lost_to_failures
    lost_valid = valid.summary.gpu_hours_lost_to_failures
    assert lost_plain > 0
    # the same bug at the same offset, on 1 GPU instead of 8
    assert lost_valid == pytest.approx(lost_plain / 8)
    assert valid.extras["failures_in_validation"] == 1
    assert valid.extras.get("failures_in_gang", 0) == 0
    assert plain.jobs[0].failures == valid.jobs[0].failures == 1
    assert plain.jobs[0].outcome == valid.jobs[0].outcome == "succeeded"
    # JCT: bug at x, then (validation only) 300 s of validation, then the hour of work
    x = lost_plain * 3600 / 8
    assert plain.jobs[0].jct_s == pytest.approx(x + 3600)
    assert valid.jobs[0].jct_s == pytest.approx(x + 300 + 3600)
    assert valid.extras["validations_passed"] == 1
    assert valid.extras["validation_gpu_h"] == pytest.approx((x + 300) / 3600)


def test_late_failures_pass_validation_and_strike_the_gang() -> None:
    c, w, _rate = _one_gang()
    late = _early(early_share=0.0)
    plain = simulate(w, c, "fifo", _cfg(late))  # type: ignore[arg-type]
    valid = simulate(w, c, "fifo", _cfg(late, min_gpus=8))  # type: ignore[arg-type]
    assert valid.summary.gpu_hours_lost_to_failures == pytest.approx(
        plain.summary.gpu_hours_lost_to_failures)
    assert valid.extras["failures_in_gang"] == 1
    assert valid.extras.get("failures_in_validation", 0) == 0
    assert valid.extras["validations_passed"] == 2  # before each of the two attempts


def test_small_gangs_are_not_validated() -> None:
    c = make_cluster().node("v100", gpus=8).build()
    w = make_workload(make_job("small", gpus=2, steps=1e5))
    r = simulate(w, c, "fifo", _cfg(FailureConfig(), min_gpus=4))
    assert "validations_passed" not in r.extras


def test_validation_holds_one_gpu_and_others_use_the_rest() -> None:
    c = make_cluster().node("v100", gpus=8).build()
    rate1 = T.throughput(RESNET, resolve_flavor("v100"))
    w = make_workload(make_job("big", gpus=8, steps=1e6),
                      make_job("s1", gpus=4, steps=rate1 * 100, submit_s=1))
    r = simulate(w, c, "fifo", _cfg(FailureConfig(), min_gpus=8))
    rec = {j.job_id: j for j in r.jobs}
    # s1 (4 GPUs) fits next to the 1-GPU validation run and starts at once
    assert rec["s1"].queue_delay_s == pytest.approx(0.0)
    assert rec["big"].first_start_s == pytest.approx(0.0)  # the validation run
    assert r.summary.succeeded == 2


def test_uniform_model_unchanged_and_deterministic() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    jobs = [make_job(f"j{i}", gpus=1 + i % 4, steps=5e4, submit_s=30 * i, max_retries=2)
            for i in range(30)]
    w = make_workload(*jobs)
    for model in ("uniform", "early-late"):
        cfg = _cfg(FailureConfig(job_failure_rate=0.5, time_model=model), min_gpus=3)  # type: ignore[arg-type]
        a = simulate(w, c, "fifo", cfg)
        b = simulate(w, c, "fifo", cfg)
        assert a.jobs == b.jobs and a.extras == b.extras


def test_validation_sees_the_same_failures_as_without() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    jobs = [make_job(f"j{i}", gpus=1 + i % 4, steps=2e5, submit_s=60 * i, max_retries=3)
            for i in range(40)]
    w = make_workload(*jobs)
    fcfg = FailureConfig(job_failure_rate=0.5, time_model="early-late", early_share=0.6,
                         early_window_s=300)
    plain = simulate(w, c, "fifo", _cfg(fcfg))
    valid = simulate(w, c, "fifo", _cfg(fcfg, min_gpus=2, validation_s=300))
    assert [j.failures for j in plain.jobs] == [j.failures for j in valid.jobs]
    assert [j.outcome for j in plain.jobs] == [j.outcome for j in valid.jobs]
    assert valid.extras["failures_in_validation"] > 0
    lost_gang = valid.summary.gpu_hours_lost_to_failures - valid.extras[
        "failure_gpu_h_in_validation"]
    assert lost_gang < plain.summary.gpu_hours_lost_to_failures
