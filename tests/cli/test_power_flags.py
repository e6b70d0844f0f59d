"""``tessera simulate --power-budget-kw`` / ``--zeus-eta`` (issue 34, parts 3a and 3b)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.runner import run_tessera


def _trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "g.trace"
    code, _out, _err = run_tessera(["traces", "generate", "--out", str(path), "--jobs", "30",
                                    "--jobs-per-hour", "20", "--seed", "0"], capsys,
                                   monkeypatch)
    assert code == 0
    return str(path)


def test_budget_and_zeus_reach_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path, capsys, monkeypatch)
    base = ["simulate", "-t", trace, "-c", "v100:4,k80:4", "-p", "fifo", "--no-plots",
            "--json", "--out", str(tmp_path / "out")]
    code, out, err = run_tessera([*base, "--power-budget-kw", "1.2"], capsys, monkeypatch)
    assert code == 0, err
    r = json.loads(out)["results"]["fifo"]
    assert r["power_budget_kw"] == 1.2 and 0 < r["peak_power_kw"] <= 1.2
    assert "power_peak_kw" not in r and "jobs_energy_kwh" not in r  # (one name per quantity)
    code, out, err = run_tessera([*base, "--power-budget-kw", "1.2", "--power-fast-boards"],
                                 capsys, monkeypatch)
    assert code == 0, err
    assert 0 < json.loads(out)["results"]["fifo"]["peak_power_kw"] <= 1.2
    code, out, err = run_tessera([*base, "--zeus-eta", "0.5", "--energy-types"], capsys,
                                 monkeypatch)
    assert code == 0, err
    assert json.loads(out)["results"]["fifo"]["zeus_cost_mj"] > 0


@pytest.mark.parametrize(("flags", "message"), [
    (["--power-budget-kw", "-1"], "--power-budget-kw must be > 0 kW, got -1"),
    (["--power-budget-kw", "3", "--power-capping", "even"], "--power-capping 'even'"),
    (["--zeus-eta", "1.5"], "--zeus-eta must be in [0, 1] (the weight of energy in Zeus's cost), "
                            "got 1.5"),
    (["--energy-types"], "needs --zeus-eta"),
    (["--power-fast-boards"], "--power-fast-boards needs --power-budget-kw"),
    (["--power-budget-kw", "3", "--power-capping", "uniform", "--power-fast-boards"],
     "--power-capping flow (got uniform)"),
])
def test_bad_power_flags_are_one_line_errors(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = _trace(tmp_path, capsys, monkeypatch)
    code, _out, err = run_tessera(["simulate", "-t", trace, "-c", "v100:2", "-p", "fifo",
                                   "--no-plots", "--out", str(tmp_path / "o"), *flags],
                                  capsys, monkeypatch)
    assert code != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last
