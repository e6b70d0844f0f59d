"""``tessera simulate --suspend-after-s`` / ``--resume-s`` / ``--off-power-w`` (issue 34, 3c)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.runner import run_tessera


def _trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "g.trace"
    code, _out, _err = run_tessera(["traces", "generate", "--out", str(path), "--jobs", "12",
                                    "--jobs-per-hour", "2", "--seed", "0"], capsys, monkeypatch)
    assert code == 0
    return str(path)


def test_sleeping_servers_cut_energy_in_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = _trace(tmp_path, capsys, monkeypatch)
    base = ["simulate", "-t", trace, "-c", "v100:16", "-p", "fifo", "--no-plots", "--json",
            "--out", str(tmp_path / "out")]
    results = {}
    for name, flags in (("awake", []), ("sleep", ["--suspend-after-s", "60",
                                                  "--resume-s", "120"])):
        code, out, err = run_tessera([*base, *flags], capsys, monkeypatch)
        assert code == 0, err
        results[name] = json.loads(out)["results"]["fifo"]
    assert results["sleep"]["energy_kwh"] < results["awake"]["energy_kwh"]
    assert results["sleep"]["server_resumes"] >= 1


@pytest.mark.parametrize(("flags", "message"), [
    (["--suspend-after-s", "-5"], "--suspend-after-s must be a finite number >= 0, got -5"),
    (["--suspend-after-s", "60", "--resume-s", "-1"],
     "--resume-s must be a finite number >= 0, got -1"),
    (["--suspend-after-s", "60", "--off-power-w", "900"], "off power 900 W per GPU is above"),
    (["--resume-s", "60"], "--resume-s and --off-power-w need --suspend-after-s"),
])
def test_bad_sleep_flags_are_one_line_errors(
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


def test_power_fast_boards_without_a_budget_names_the_missing_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Review) it said "needs --power-budget-kw with --power-capping flow (got flow)": the
    capping named was right, the budget missing went unsaid."""
    trace = _trace(tmp_path, capsys, monkeypatch)
    code, _out, err = run_tessera(["simulate", "-t", trace, "-c", "v100:2", "-p", "fifo",
                                   "--no-plots", "--out", str(tmp_path / "o"),
                                   "--power-fast-boards"], capsys, monkeypatch)
    assert code != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and "(got no --power-budget-kw)" in last


def test_an_infinite_sleep_time_is_refused_as_not_finite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Review) ``inf`` was refused as "must be >= 0, got inf", which it is."""
    trace = _trace(tmp_path, capsys, monkeypatch)
    code, _out, err = run_tessera(["simulate", "-t", trace, "-c", "v100:2", "-p", "fifo",
                                   "--no-plots", "--out", str(tmp_path / "o"),
                                   "--suspend-after-s", "inf"], capsys, monkeypatch)
    assert code != 0
    assert "--suspend-after-s must be a finite number >= 0, got inf" in err.strip().splitlines()[-1]
