"""``tessera simulate --carbon-shift`` / ``--carbon-price`` / ``--slack-h`` (issue 34, 3c)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.runner import run_tessera


def _inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A small generated trace, and a 4-day carbon CSV (dirty by day, clean by night)."""
    path = tmp_path / "g.trace"
    code, _out, _err = run_tessera(["traces", "generate", "--out", str(path), "--jobs", "30",
                                    "--jobs-per-hour", "20", "--seed", "0"], capsys,
                                   monkeypatch)
    assert code == 0
    rows = [f"2020-01-0{1 + h // 24} {h % 24:02d}:00,{400 if 8 <= h % 24 < 20 else 100}"
            for h in range(96)]
    csv = tmp_path / "ci.csv"
    csv.write_text("time,intensity\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return str(path), str(csv)


def test_shifting_cuts_carbon_in_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    trace, csv = _inputs(tmp_path, capsys, monkeypatch)
    base = ["simulate", "-t", trace, "-c", "v100:8", "-p", "fifo", "--no-plots", "--json",
            "--out", str(tmp_path / "out"), "--carbon", csv, "--slack-h", "24"]
    kg = {}
    for mode in ("none", "wait-awhile", "ours"):
        flags = [] if mode == "none" else ["--carbon-shift", mode]
        code, out, err = run_tessera([*base, *flags], capsys, monkeypatch)
        assert code == 0, err
        kg[mode] = json.loads(out)["results"]["fifo"]["carbon_kg"]
    assert kg["ours"] < kg["none"] and kg["wait-awhile"] < kg["none"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--carbon-shift", "greedy"], "--carbon-shift 'greedy': one of carbon-time, wait-awhile"),
    (["--carbon-shift", "ours"], "--carbon-shift ours needs --carbon"),
    (["--carbon-shift", "ours", "--carbon-price", "-3"], "--carbon-price must be >= 0"),
    (["--slack-h", "-1"], "--slack-h must be >= 0 hours, got -1"),
])
def test_bad_shift_flags_are_one_line_errors(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace, _csv = _inputs(tmp_path, capsys, monkeypatch)
    code, _out, err = run_tessera(["simulate", "-t", trace, "-c", "v100:2", "-p", "fifo",
                                   "--no-plots", "--out", str(tmp_path / "o"), *flags],
                                  capsys, monkeypatch)
    assert code != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last
