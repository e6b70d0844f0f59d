"""The speed estimator (issue 35): completion, the prior, updates from observations, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.completion import complete, fit_rows
from tessera.perf.estimate import SpeedBook, SpeedEstimator, table_matrix
from tessera.perf.profiles import default_throughputs
from tessera.perf.sia_table import sia_throughputs


def _rank1(rows: int = 24, cols: int = 5, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a, c = rng.normal(0, 1, rows), rng.normal(2, 1, cols)
    u, v = rng.normal(0, 1, rows), rng.normal(0, 0.5, cols)
    return a[:, None] + c[None, :] + np.outer(u, v)


def test_completion_recovers_a_known_low_rank_table_exactly() -> None:
    truth = _rank1()
    holes = np.random.default_rng(2).random(truth.shape) < 0.2
    holes[:, 0] &= False  # every row keeps enough cells to pin its factors
    holes[:, 1] &= False
    holes[:, 2] &= False
    seen = np.where(holes, np.nan, truth)
    fit = complete(seen, rank=1, reg=1e-9, iterations=400)
    assert holes.sum() > 5
    np.testing.assert_allclose(fit.predict_log()[holes], truth[holes], atol=1e-4)


def test_two_observations_recover_a_new_row_of_a_rank_one_table() -> None:
    truth = _rank1(rows=25)
    fit = complete(truth[:-1], rank=1, reg=1e-9, iterations=400)
    seen = np.zeros((1, truth.shape[1]), dtype=bool)
    seen[0, :2] = True
    row = fit_rows(fit.col_bias, fit.col_factors, truth[-1:], seen, reg=1e-9)
    np.testing.assert_allclose(row[0], truth[-1], atol=1e-3)


def test_one_observation_fixes_the_scale() -> None:
    est = SpeedEstimator.from_table(default_throughputs())
    one = est.estimate({"P100": 3.0})
    two = est.estimate({"P100": 6.0})
    assert one["P100"] == pytest.approx(3.0)
    for f in est.flavors:
        assert two[f] == pytest.approx(2 * one[f])
    prior = est.prior()
    # the whole row shifts by the observed log-ratio to the prior
    assert one["K80"] / prior["K80"] == pytest.approx(3.0 / prior["P100"])


def test_a_flavor_no_table_covers_is_answered_by_the_roofline() -> None:
    est = SpeedEstimator.from_table(default_throughputs(), extra_flavors=["H100-80GB"])
    assert est.roofline == ("H100-80GB",)
    guess = est.estimate({"V100-16GB": 10.0})
    h100, v100 = resolve_flavor("H100-80GB"), resolve_flavor("V100-16GB")
    # one observation, the typical job's shape: the new flavor's ratio to the mean of the
    # covered ones follows the FP32 peak
    assert guess["H100-80GB"] > guess["V100-16GB"] > 0
    spread = np.mean([math.log(guess[f]) - math.log(resolve_flavor(f).fp32_tflops)
                      for f in est.flavors if f != "H100-80GB"])
    assert math.log(guess["H100-80GB"]) == pytest.approx(spread + math.log(h100.fp32_tflops))
    assert v100.fp32_tflops < h100.fp32_tflops


def test_copied_flavors_answer_from_their_source() -> None:
    est = SpeedEstimator.from_table(sia_throughputs())
    assert "A100-80GB" not in est.flavors  # a copy of A100-40GB's measurements
    assert est.column("A100-80GB") == est.column("A100-40GB")


def test_same_model_neighbours_give_the_shape() -> None:
    table = sia_throughputs()
    job = "imagenet (batch size 115)"
    est = SpeedEstimator.from_table(table, without_job_types=[job])
    assert job not in est.references
    types, flavors, logs = table_matrix(table)
    truth = logs[types.index(job)]
    seen = {"V100-16GB": float(np.exp(truth[flavors.index("V100-16GB")]))}
    plain, like = est.estimate(seen), est.estimate(seen, model="imagenet")
    a100 = float(np.exp(truth[flavors.index("A100-40GB")]))
    assert abs(like["A100-40GB"] / a100 - 1) < abs(plain["A100-40GB"] / a100 - 1)
    assert abs(like["A100-40GB"] / a100 - 1) < 0.10
    assert est.estimate(seen, model="no-such-model") == plain


def test_speed_book_matches_the_estimator_and_keeps_the_prior_for_the_unseen() -> None:
    est = SpeedEstimator.from_table(default_throughputs())
    book = SpeedBook(est, capacity=1)
    book.observe("a", "K80", 2.0)
    book.observe("a", "K80", 8.0)  # averaged in logs: 4.0
    book.observe("b", "P100", 5.0)
    book.observe("b", "V100-16GB", 7.0)
    book.update()
    assert book.rate("a", "K80") == pytest.approx(4.0)
    assert book.rate("a", "V100-16GB") == pytest.approx(est.estimate({"K80": 4.0})["V100-16GB"])
    b = est.estimate({"P100": 5.0, "V100-16GB": 7.0})
    assert book.rate("b", "K80") == pytest.approx(b["K80"])
    assert book.rate("c", "P100") == pytest.approx(est.prior()["P100"])


@pytest.mark.parametrize("rate", [0.0, -1.0, math.inf, math.nan])
def test_a_rate_that_is_not_positive_and_finite_is_refused(rate: float) -> None:
    est = SpeedEstimator.from_table(default_throughputs())
    with pytest.raises(SpecError, match="positive, finite"):
        est.estimate({"K80": rate})
    with pytest.raises(SpecError, match="positive, finite"):
        SpeedBook(est).observe("job", "K80", rate)


def test_a_flavor_not_in_the_table_is_refused() -> None:
    est = SpeedEstimator.from_table(default_throughputs())
    with pytest.raises(SpecError, match="A100-40GB is not in this speed estimator"):
        est.estimate({"A100-40GB": 1.0})
    with pytest.raises(SpecError, match="A100-40GB is not in this speed estimator"):
        SpeedBook(est).observe("job", "A100-40GB", 1.0)
    with pytest.raises(SpecError, match="not in gavel"):
        SpeedEstimator.from_table(default_throughputs(), without_flavors=["T4"])
