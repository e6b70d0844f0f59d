"""Issue 35 part 5: Pollux's agent -- the goodput model fitted from a job's own reports."""

from __future__ import annotations

import math

import pytest

from tessera.errors import SpecError
from tessera.perf.efficiency import load_efficiency
from tessera.perf.goodput_fit import (
    GnsEfficiency,
    ThroughputParams,
    check_gns,
    fit_throughput,
    quantize_gns,
)


def test_fit_recovers_known_throughput_parameters() -> None:
    truth = ThroughputParams(0.02, 0.0004, 0.03, 0.002, 2.0)
    obs = [(n, m, truth.iteration_s(n, m)) for n in (1, 2, 4, 8, 16) for m in (16, 32, 64, 128)]
    fit = fit_throughput(obs)
    for got, want in zip(fit.as_array(), truth.as_array(), strict=True):
        assert got == pytest.approx(want, rel=0.02)
    # and it predicts a size it never saw
    assert fit.iteration_s(12, 48) == pytest.approx(truth.iteration_s(12, 48), rel=0.01)


def test_fit_on_one_gpu_leaves_sync_at_zero() -> None:
    truth = ThroughputParams(0.05, 0.001)
    fit = fit_throughput([(1, m, truth.iteration_s(1, m)) for m in (32, 64)])
    assert (fit.alpha_sync_s, fit.beta_sync_s_per_gpu) == (0.0, 0.0)
    assert fit.alpha_grad_s == pytest.approx(0.05, rel=1e-3)
    assert fit.beta_grad_s_per_sample == pytest.approx(0.001, rel=1e-3)


@pytest.mark.parametrize("obs", [[], [(1, 32.0, 0.0)], [(1, 32.0, math.nan)], [(0, 32.0, 1.0)]])
def test_bad_observations_are_refused(obs: list[tuple[int, float, float]]) -> None:
    with pytest.raises(SpecError):
        fit_throughput(obs)


@pytest.mark.parametrize(("value", "word"), [(-1.0, ">= 0"), (math.nan, "finite"),
                                             (math.inf, "finite"), ("12", "number"),
                                             (True, "number")])
def test_bad_gns_is_refused_with_a_reason(value: object, word: str) -> None:
    why = check_gns(value)
    assert why is not None and word in why and why.startswith("gns")
    if isinstance(value, float):
        with pytest.raises(SpecError, match="gns"):
            GnsEfficiency(value, 128)


def test_gns_efficiency_is_pollux_closed_form() -> None:
    eff = GnsEfficiency(noise_scale_samples=500.0, initial_batch_samples=100)
    assert eff.efficiency(100) == 1.0
    assert eff.efficiency(600) == pytest.approx(600 / 1100)
    assert GnsEfficiency(0.0, 100).efficiency(400) == pytest.approx(0.25)
    assert quantize_gns(123456.0) == 123000.0 and quantize_gns(0.01234) == 0.0123


@pytest.mark.parametrize("model", ["cifar10", "imagenet", "bert"])
def test_gns_from_the_table_reproduces_the_table_efficiency(model: str) -> None:
    """Where the table is the truth: the noise scale it implies at the initial batch, put
    through the closed form, gives the table's own efficiency on the initial batch's run."""
    prof = load_efficiency(model)
    m0 = prof.initial_batch_samples
    for frac in (0.0, 0.5, 0.95):
        progress = frac * prof.target_samples
        phi = prof.noise_scale_samples(m0, progress)
        fitted = GnsEfficiency(phi, m0)
        sqr, var = prof.grad_stats(m0, progress)
        for m in (2 * m0, 4 * m0):
            s = m / m0
            table_form = (var + sqr) / (var / s + sqr) / s  # gain / scale at M0's statistics
            assert fitted.efficiency(m) == pytest.approx(table_form, rel=1e-9)


def test_one_local_batch_gives_the_cautious_prior() -> None:
    """Compute time proportional to the batch until a second local batch is observed, and
    the sync terms fitted from two gang sizes."""
    fit = fit_throughput([(1, 64, 0.2), (4, 64, 0.25)])
    assert fit.alpha_grad_s == 0.0
    assert fit.beta_grad_s_per_sample * 64 == pytest.approx(0.2, rel=1e-3)
    assert fit.iteration_s(4, 64) == pytest.approx(0.25, rel=1e-3)
    assert fit.throughput_samples_per_s(1, 128) == pytest.approx(fit.throughput_samples_per_s(
        1, 64), rel=1e-6)
    # accumulation: k - 1 compute passes before the one that overlaps the sync
    assert fit.iteration_s(4, 64, 3) == pytest.approx(2 * 0.2 + 0.25, rel=1e-3)
