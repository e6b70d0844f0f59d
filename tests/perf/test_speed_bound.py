"""Hindsight bounds of one-observation speed predictors (``tessera speeds --bound``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tessera.perf.profiles import ThroughputTable
from tessera.perf.speed_bound import best_ratio, one_observation_bounds


def _table() -> ThroughputTable:
    """Two flavors, three job types: rates on T4 1, 1, 1; on V100 1, 2, 4 (ratios 1, 2, 4).

    Model m has two batch sizes, model n one (so it shares the pair's ratio with nobody).
    """
    rates = {"m (batch size 1)": (1.0, 1.0), "m (batch size 2)": (1.0, 2.0),
             "n (batch size 1)": (1.0, 4.0)}
    iso = {("T4", True): {(t, 1): a for t, (a, _b) in rates.items()},
           ("V100-16GB", True): {(t, 1): b for t, (_a, b) in rates.items()}}
    return ThroughputTable("hand", iso, {})


def test_the_best_ratio_is_the_weighted_median_computed_by_hand() -> None:
    # sum |c/x - 1| over x = 1, 2, 4 is 0 + 1/2 + 3/4 at c = 1, 1 + 0 + 1/2 at c = 2
    assert best_ratio([4.0, 1.0, 2.0]) == 1.0
    assert best_ratio([1.0, 0.5, 0.25]) == 0.25  # the other direction: weights 1, 2, 4
    with pytest.raises(ValueError, match="positive, finite"):
        best_ratio([1.0, 0.0])


def test_bounds_of_a_hand_made_table() -> None:
    by = {b.flavor: b for b in one_observation_bounds(_table())}
    # V100 from T4: c = 1, errors 0, 1/2, 3/4; T4 from V100: c = 1/4, errors 3/4, 1/2, 0
    for flavor, source in (("V100-16GB", "T4"), ("T4", "V100-16GB")):
        b = by[flavor]
        assert b.scale == pytest.approx(100 * 1.25 / 3)
        assert b.predictions == 3 and b.best_source == source
    # model known: m's two job types get their own ratio (errors 0 and 1/2 or 1/2 and 0), n's
    # one is alone in the shared group (error 0)
    assert by["V100-16GB"].scale_model == pytest.approx(100 * 0.5 / 3)
    # a power law through the rates: on T4 every rate is 1, so r**b cannot tell them apart
    assert by["V100-16GB"].power == pytest.approx(by["V100-16GB"].scale)
    # from V100 (rates 1, 2, 4) to T4 (all 1), c * r**0 = 1 is exact
    assert by["T4"].power == pytest.approx(0.0, abs=1e-9)
    assert by["T4"].power_model == pytest.approx(0.0, abs=1e-9)


def test_the_bound_is_a_column_of_tessera_speeds() -> None:
    from tessera.cli import app

    result = CliRunner().invoke(app, ["speeds", "--table", "gavel", "-k", "0", "-k", "1",
                                      "--protocol", "job-type", "--bound", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    one = [r for r in rows if r["k"] == 1]
    assert one and all(r["bound_scale"] >= r["bound_power"] - 1e-9 for r in one)
    assert all("bound_scale" not in r for r in rows if r["k"] == 0)
    text = CliRunner().invoke(app, ["speeds", "--table", "gavel", "-k", "1", "--bound"])
    assert "scale %" in text.output and "r^b %" in text.output



@pytest.mark.parametrize("flags", [["--bound"], ["--prior", "mape"]])
def test_a_one_observation_flag_without_k_1_is_a_one_line_error(
        flags: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--bound -k 0`` printed the table without a bound column and ``--prior mape -k 2``
    an empty table after 'skipped' lines, exit 0: the flag was silently ignored."""
    from tests.cli.runner import run_tessera

    code, out, err = run_tessera(["speeds", "--table", "gavel", "-k", "0", "-k", "2",
                                  "--protocol", "job-type", *flags], capsys, monkeypatch)
    assert code == 2 and "table" not in out
    assert err.strip().splitlines() == [
        f"error: {' '.join(flags)} is for one observation: add -k 1 (got -k 0 -k 2)"]
