"""The roofline step-time model: every catalog GPU answered, calibration visible."""

from __future__ import annotations

import pytest

from tessera.errors import NoProfileError
from tessera.model.gpus import CATALOG, resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.perf.roofline import (
    PUBLISHED_LLM,
    RESNET50_TRAIN_FLOPS,
    Roofline,
    peak_flops_per_s,
)
from tessera.perf.steptime import CostModel


@pytest.fixture(scope="module")
def cm() -> CostModel:
    return CostModel(estimate_unprofiled=True)


@pytest.fixture(scope="module")
def rl(cm: CostModel) -> Roofline:
    return Roofline(cm, default_throughputs())


@pytest.mark.parametrize("workload", ["transformer", "cnn", "cnn-fp32"])
def test_every_catalog_gpu_gets_a_speed_below_its_peak(rl: Roofline, workload: str) -> None:
    for f in CATALOG:
        sustained = rl.sustained_flops_per_s(f, workload)
        assert 0 < sustained <= peak_flops_per_s(f, workload)


def test_measured_gpus_reproduce_their_measurement(rl: Roofline, cm: CostModel) -> None:
    a100 = resolve_flavor("A100-40GB")
    beta = cm.fit("imagenet", a100).beta_s_per_sample
    assert rl.sustained_flops_per_s(a100, "cnn") == pytest.approx(RESNET50_TRAIN_FLOPS / beta)
    for m in PUBLISHED_LLM:
        assert rl.efficiency(m.flavor, "transformer").measured
        assert rl.sustained_flops_per_s(m.flavor, "transformer") == pytest.approx(
            m.achieved_flops_per_s)


def test_twins_and_estimates_are_labelled(rl: Roofline) -> None:
    h200 = rl.efficiency(resolve_flavor("H200"), "transformer")
    assert h200.measured and "H100" in h200.source
    a100_40 = rl.efficiency(resolve_flavor("A100-40GB"), "transformer")
    assert a100_40.measured and "A100-80GB" in a100_40.source
    l4 = rl.efficiency(resolve_flavor("L4"), "transformer")
    assert not l4.measured and "estimate" in l4.source


def test_calibration_error_is_leave_one_out(rl: Roofline) -> None:
    rows = rl.calibration("transformer")
    assert {r.flavor.short for r in rows} == {m.flavor.short for m in PUBLISHED_LLM}
    for r in rows:     # predicted from the others' median, so not the measurement itself
        assert r.predicted_flops_per_s != pytest.approx(r.measured_flops_per_s, rel=1e-6)
        assert r.error == pytest.approx(r.predicted_flops_per_s / r.measured_flops_per_s - 1)


def test_gavel_fp32_class_reads_the_bundled_profiles(rl: Roofline) -> None:
    assert {m.flavor.short for m in rl.measurements("cnn-fp32")} == {"K80", "P100", "V100-16GB"}


def test_roofline_time_is_compute_or_bandwidth_bound(rl: Roofline) -> None:
    h100 = resolve_flavor("H100")
    compute = rl.time_s(1e15, 0.0, h100, "transformer")
    assert compute == pytest.approx(1e15 / 400e12)
    memory = rl.time_s(1.0, 3350e9, h100, "transformer")
    assert memory == pytest.approx(1.0)


def test_unknown_workload_is_a_clear_error(rl: Roofline) -> None:
    with pytest.raises(NoProfileError, match="unknown workload"):
        rl.efficiency(resolve_flavor("T4"), "rnn")


def test_cost_model_estimates_only_when_asked(cm: CostModel) -> None:
    fit = cm.fit("imagenet", resolve_flavor("H100"))
    assert fit.estimated and fit.source_flavor.short == "A100-40GB"
    assert fit.beta_s_per_sample < cm.fit("imagenet", resolve_flavor("A100-40GB")).beta_s_per_sample
    assert not cm.fit("imagenet", resolve_flavor("V100")).estimated
    with pytest.raises(NoProfileError, match="profiled flavors"):
        CostModel().fit("imagenet", resolve_flavor("H100"))
