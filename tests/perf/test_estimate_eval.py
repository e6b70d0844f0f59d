"""Leave-one-out evaluation of the speed estimator (``tessera speeds``): reproducible numbers."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError
from tessera.perf.profiles import default_throughputs
from tessera.perf.sia_table import sia_throughputs
from tessera.perf.speed_eval import evaluate


def test_leave_one_out_numbers_are_reproducible() -> None:
    first = evaluate(sia_throughputs(), "job-type", 1, use_model=True)
    assert first == evaluate(sia_throughputs(), "job-type", 1, use_model=True)
    by_flavor = {e.flavor: e for e in first}
    # the figures docs/scheduler.md ("Learned speeds") quotes
    assert by_flavor["A100-40GB"].mape == pytest.approx(9.5, abs=0.05)
    assert by_flavor["T4"].mape == pytest.approx(18.6, abs=0.05)
    assert {e.flavor for e in first} == {"A100-40GB", "RTX-2080Ti", "RTX-6000", "T4",
                                         "V100-16GB"}


def test_observations_help_and_the_flavor_protocol_counts_every_job() -> None:
    table = default_throughputs()
    prior = {e.flavor: e.mape for e in evaluate(table, "job-type", 0)}
    one = {e.flavor: e for e in evaluate(table, "job-type", 1)}
    two = {e.flavor: e.mape for e in evaluate(table, "job-type", 2)}
    for f in prior:
        assert two[f] < one[f].mape < prior[f]
        assert one[f].best_source and one[f].best_source != f
    flavor = evaluate(table, "flavor", 1)
    assert [e.predictions for e in flavor] == [52, 52, 52]  # 26 types x 2 observed flavors


def test_impossible_requests_are_refused() -> None:
    with pytest.raises(SpecError, match="k can be 0 to 1 for the flavor protocol"):
        evaluate(default_throughputs(), "flavor", 2)
    with pytest.raises(SpecError, match="protocol 'row'"):
        evaluate(default_throughputs(), "row", 1)


def test_the_kernels_prior_beats_one_peak_per_flavor_on_gavels_unseen_flavors() -> None:
    """Leave-one-flavor-out, one observation: the figures docs/scheduler.md quotes."""
    from collections import Counter

    from tessera.perf.kernel_eval import evaluate_kernels

    table = default_throughputs()
    choices: Counter[tuple[str, str, float]] = Counter()
    kernels = {e.flavor: e for e in evaluate_kernels(table, "flavor", 1, choices=choices)}
    peak = {e.flavor: e for e in evaluate(table, "flavor", 1)}
    assert {f: round(e.mape, 1) for f, e in kernels.items()} == {
        "K80": 64.2, "P100": 33.6, "V100-16GB": 85.1}
    for f, e in kernels.items():
        assert e.mape < peak[f].mape
        assert e.predictions == peak[f].predictions == 52
    # cross-validation chose the kernels' roofline for (nearly) every prediction
    assert sum(n for (_f, _r, w), n in choices.items() if w > 0) == 78
    assert evaluate_kernels(table, "flavor", 1) == list(kernels.values())  # deterministic
