"""Step-time fits, the Sia reader and the memory model (tessera.perf.{sia,steptime,memory})."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.errors import NoProfileError, TraceFormatError, UnknownFlavorError
from tessera.model.gpus import resolve_flavor, resolve_flavors
from tessera.perf.memory import GIB, MemoryBudget, TrainingFootprint
from tessera.perf.sia import load_sia_profile, sia_flavors, sia_models
from tessera.perf.steptime import CostModel, DeviceCost, fit_linear

SHARED_SIA = Path("/work/shared/data/profiles/sia")


@pytest.fixture(scope="module")
def cm() -> CostModel:
    return CostModel()


def test_bundled_models_and_flavors() -> None:
    assert set(sia_models()) == {"bert", "cifar10", "deepspeech2", "gpt_pmp", "imagenet",
                                 "ncf", "yolov3"}
    shorts = {f.short for f in sia_flavors("imagenet")}
    assert shorts == {"T4", "V100-16GB", "A100-40GB", "RTX-2080Ti", "RTX-6000"}


def test_dgx_and_dgx_ext_merge_into_one_a100_profile() -> None:
    p = load_sia_profile("imagenet", resolve_flavor("A100-40GB"))
    assert len(p.sources) == 2
    assert p.n_rows == 528 + 352
    assert p.max_local_bsz == 800


@pytest.mark.skipif(not SHARED_SIA.exists(), reason="shared Sia data not available")
def test_bundled_copy_equals_shared_data() -> None:
    a = load_sia_profile("bert", resolve_flavor("V100"))
    b = load_sia_profile("bert", resolve_flavor("V100"), root=SHARED_SIA)
    assert a.local_bsz == b.local_bsz and a.step_time_s == b.step_time_s


@pytest.mark.parametrize(
    "header",
    ["placement,local_bsz,step_time,sync_time", "local_bsz,step_time,sync_time,placement"],
    ids=["pollux-order", "sia-order"],
)
def test_reader_uses_header_names(tmp_path: Path, header: str) -> None:
    cols = header.split(",")
    vals = {"placement": "1", "local_bsz": "8", "step_time": "0.5", "sync_time": "0.1"}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "placements-azure.csv").write_text(
        header + "\n" + ",".join(vals[c] for c in cols) + "\n"
    )
    p = load_sia_profile("m", resolve_flavor("V100"), root=tmp_path)
    assert (p.placement, p.local_bsz, p.step_time_s, p.sync_time_s) == (("1",), (8,), (0.5,),
                                                                        (0.1,))


def test_reader_reports_missing_column(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "placements-aws.csv").write_text("placement,local_bsz,step_time\n1,2,3\n")
    with pytest.raises(TraceFormatError, match="sync_time"):
        load_sia_profile("m", resolve_flavor("T4"), root=tmp_path)


@given(alpha=st.floats(0.0, 1.0), beta=st.floats(1e-5, 0.1))
def test_fit_linear_recovers_an_exact_line(alpha: float, beta: float) -> None:
    b = np.array([4, 8, 16, 32, 64], dtype=float)
    a, bt, res = fit_linear(b, alpha + beta * b)
    assert a == pytest.approx(alpha, abs=1e-9)
    assert bt == pytest.approx(beta, rel=1e-6)
    assert np.abs(res).max() < 1e-9


def test_fit_linear_keeps_alpha_nonnegative_and_beta_positive() -> None:
    a, b, _ = fit_linear([1, 2, 3], [0.0, 0.2, 0.4])     # intercept would be -0.2
    assert a == 0.0 and b > 0
    a, b, _ = fit_linear([1, 2, 3], [0.3, 0.2, 0.1])     # falling: flat fallback
    assert a == pytest.approx(0.2) and b > 0


@pytest.mark.parametrize(
    ("model", "flavor", "min_r2"),
    [("imagenet", "V100", 0.99), ("imagenet", "T4", 0.99), ("bert", "A100-40GB", 0.95),
     ("cifar10", "RTX-2080Ti", 0.99), ("deepspeech2", "RTX-6000", 0.95)],
    ids=["resnet50-v100", "resnet50-t4", "bert-a100", "cifar-2080ti", "ds2-rtx6000"],
)
def test_fits_are_good_where_step_time_is_linear(cm: CostModel, model: str, flavor: str,
                                                 min_r2: float) -> None:
    f = cm.fit(model, resolve_flavor(flavor))
    assert f.r2 >= min_r2
    assert f.alpha_s >= 0 and f.beta_s_per_sample > 0
    assert f.rows_used == "single-GPU"
    assert f.max_abs_residual_s < 0.2 * f.step_time_s(f.max_bsz)


def test_faster_gpu_has_smaller_per_sample_cost(cm: CostModel) -> None:
    flavors = resolve_flavors(("T4", "V100", "A100-40GB"))
    betas = {f.short: cm.fit("imagenet", f).beta_s_per_sample for f in flavors}
    assert betas["A100-40GB"] < betas["V100-16GB"] < betas["T4"]


def test_same_silicon_twin_uses_profile_of_its_twin(cm: CostModel) -> None:
    f80 = cm.fit("bert", resolve_flavor("A100-80GB"))
    f40 = cm.fit("bert", resolve_flavor("A100-40GB"))
    assert f80.source_flavor.short == "A100-40GB" and f80.flavor.short == "A100-80GB"
    assert (f80.alpha_s, f80.beta_s_per_sample) == (f40.alpha_s, f40.beta_s_per_sample)


@pytest.mark.parametrize(
    ("model", "flavor", "error", "message"),
    [("imagenet", "H100", NoProfileError, "profiled flavors: T4"),
     ("resnet9000", "T4", NoProfileError, "known models: bert"),
     ("gpt_pmp", "RTX-2080Ti", NoProfileError, "pipeline-parallel"),
     ("imagenet", "TPUv4", UnknownFlavorError, "known flavors")],
    ids=["unprofiled-flavor", "unknown-model", "pipeline-only-profile", "unknown-flavor"],
)
def test_missing_data_is_a_clear_error(cm: CostModel, model: str, flavor: str,
                                       error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        cm.fit(model, resolve_flavor(flavor))


def test_device_cost_accumulation_pays_alpha_per_micro_step() -> None:
    from tessera.model.gpus import resolve_flavor

    c = DeviceCost(resolve_flavor("T4"), alpha_s=0.1, beta_s_per_sample=0.01, max_local_bsz=10)
    assert c.step_time_s(0) == 0.0
    assert c.step_time_s(10) == pytest.approx(0.2)
    assert c.step_time_s(11) == pytest.approx(0.2 + 0.11)
    assert c.best_rate_samples_per_s() == pytest.approx(10 / 0.2)


def test_achieved_flops_are_calibrated_and_below_peak(cm: CostModel) -> None:
    v100 = cm.achieved_flops_per_s(resolve_flavor("V100"))
    assert 5e12 < v100 < 125e12
    h100, a100 = resolve_flavor("H100"), resolve_flavor("A100-40GB")
    assert cm.achieved_flops_per_s(h100) > cm.achieved_flops_per_s(a100)


def test_gradient_bytes(cm: CostModel) -> None:
    assert cm.gradient_bytes("imagenet") == pytest.approx(25.6e6 * 4)


@pytest.mark.parametrize(
    ("mem_gib", "params", "act_bytes", "expected"),
    [(16, 0, GIB, 13), (16, 1e9, GIB, 0), (80, 1e9, 0.5 * GIB, 2 * int((71.0 - 14.9) // 1))],
    ids=["activations-only", "state-too-big", "1B-params-on-80GB"],
)
def test_memory_model_max_batch(mem_gib: float, params: float, act_bytes: float,
                                expected: int) -> None:
    fp = TrainingFootprint(params, act_bytes)
    budget = MemoryBudget(mem_gib)
    got = fp.max_local_bsz(budget)
    assert abs(got - expected) <= 1
    assert not fp.fits(budget, got + 1)
    if got:
        assert fp.fits(budget, got)
        assert fp.min_mem_gib(got) <= mem_gib < fp.min_mem_gib(got + 1)
