"""Statistical efficiency from the validation curves, against values worked out by hand from the
CSV rows (Pollux's formula as the data README states it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import NoProfileError, SpecError, TraceFormatError
from tessera.perf.efficiency import NoEfficiencyDataError, load_efficiency
from tests.sia_hand import BUNDLED, rows


def _row(model: str, batch: int, epoch: int) -> dict[str, float]:
    row = rows(BUNDLED / model / f"validation-{batch}.csv")[epoch]
    return {k: float(v) for k, v in row.items()}


def _mid_epoch(model: str, batch: int, epoch: int) -> float:
    """Samples (at M0) half-way through ``epoch`` of the run at ``batch``."""
    before = _row(model, batch, epoch - 1)["progress"]
    after = _row(model, batch, epoch)["progress"]
    m0 = load_efficiency(model).initial_batch_samples
    return (before + after) / 2 * m0


def test_efficiency_at_a_measured_batch_is_pollux_formula_on_that_epochs_row() -> None:
    r = _row("cifar10", 512, 10)
    phi = 128 * r["grad_var"] / r["grad_sqr"]  # gradient noise scale, samples
    expected = (phi + 128) / (phi + 512)
    got = load_efficiency("cifar10").efficiency(512, _mid_epoch("cifar10", 512, 10))
    assert got == pytest.approx(expected, rel=1e-12)
    assert 0 < got < 1


def test_efficiency_between_two_runs_interpolates_their_gradient_statistics() -> None:
    # 768 lies half-way between the 512 and 1024 runs; both at their 30th epoch.
    lo, hi = _row("cifar10", 512, 30), _row("cifar10", 1024, 30)
    sqr = (lo["grad_sqr"] + hi["grad_sqr"]) / 2
    var = (lo["grad_var"] + hi["grad_var"]) / 2
    s = 768 / 128
    expected = (var + sqr) / (var / s + sqr) / s  # README's gain form: gain / scale
    progress = _mid_epoch("cifar10", 1024, 30)
    assert _mid_epoch("cifar10", 512, 30) == pytest.approx(progress, rel=0.01)
    assert load_efficiency("cifar10").efficiency(768, progress) == pytest.approx(expected)


def test_efficiency_is_one_at_the_reference_batch_and_grows_with_training() -> None:
    eff = load_efficiency("imagenet")
    assert eff.initial_batch_samples == 200
    assert eff.efficiency(200, 1e6) == pytest.approx(1.0)
    early, late = eff.efficiency(3200, 1e6), eff.efficiency(3200, 100e6)
    assert early < late  # the noise scale grows: large batches pay off late


def test_a_zero_mean_gradient_gives_efficiency_one() -> None:
    # deepspeech2's 40-run measured grad_sqr = 0 in one late epoch: infinite noise scale.
    data = rows(BUNDLED / "deepspeech2" / "validation-40.csv")
    epoch = next(i for i, r in enumerate(data) if float(r["grad_sqr"]) == 0.0)
    progress = _mid_epoch("deepspeech2", 40, epoch)
    assert load_efficiency("deepspeech2").efficiency(40, progress) == pytest.approx(1.0)


def test_target_and_rigid_steps_come_from_the_curves() -> None:
    eff = load_efficiency("cifar10")
    assert eff.target_samples == pytest.approx(_row("cifar10", 128, -1)["progress"] * 128)
    assert eff.rigid_steps(2048) == _row("cifar10", 2048, -1)["iteration"]
    assert eff.batches == (128, 256, 512, 1024, 2048, 4096)


@pytest.mark.parametrize("batch", [64, 8192])
def test_a_batch_outside_the_profiled_range_is_refused(batch: int) -> None:
    with pytest.raises(SpecError, match=f"{batch} is outside the profiled range 128-4096"):
        load_efficiency("cifar10").efficiency(batch, 0.0)


def test_models_without_curves_or_unknown_are_named() -> None:
    with pytest.raises(NoEfficiencyDataError, match="gpt_pmp"):
        load_efficiency("gpt_pmp")
    with pytest.raises(NoProfileError, match="profiled models: bert"):
        load_efficiency("resnet9000")


def test_a_malformed_curve_names_its_file_and_line(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "validation-8.csv").write_text(
        "progress,iteration,metric,grad_sqr,grad_var\n1,1,0.5,1.0,2.0\n2,2,0.6,oops,2.0\n")
    with pytest.raises(TraceFormatError, match=r"m/validation-8.csv:3 \(field 'grad_sqr'\)"):
        load_efficiency("m", tmp_path)
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "validation-8.csv").write_text("progress,iteration,metric\n1,1,0.5\n")
    with pytest.raises(TraceFormatError, match="missing column"):
        load_efficiency("n", tmp_path)
