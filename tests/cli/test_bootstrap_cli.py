"""``tessera simulate --speeds learned --bootstrap-s``: the error-over-time CSV and plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.cli.runner import run_tessera

SMALL = ["simulate", "-t", "philly", "--limit", "12", "-c", "v100:4,k80:4", "-p",
         "hetero_srpt", "--speeds", "learned"]


def test_learned_run_writes_the_error_series_csv_plot_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run_tessera([*SMALL, "--bootstrap-s", "120", "--out", str(tmp_path),
                                  "--json"], capsys, monkeypatch)
    assert code == 0, err
    result = json.loads(out)["results"]["hetero_srpt"]
    assert result["bootstrap_gpu_h"] > 0 and result["estimate_error"]
    rows = list(csv.DictReader((tmp_path / "estimate-error-hetero_srpt.csv").open()))
    assert len(rows) == len(result["estimate_error"]) and float(rows[0]["jobs"]) >= 1
    assert (tmp_path / "estimate_error.png").exists()
    assert "estimate_error" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize(("flags", "message"), [
    (["--bootstrap-s", "0"], "--bootstrap-s must be > 0 seconds"),
    (["--measurement-noise", "-1"], "--measurement-noise must be >= 0"),
])
def test_bad_bootstrap_flags_are_refused(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, _out, err = run_tessera([*SMALL, "--no-plots", *flags], capsys, monkeypatch)
    assert code != 0 and message in " ".join(err.split())


def test_bootstrap_needs_learned_speeds(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = ["simulate", "-t", "philly", "--limit", "5", "-c", "v100:4", "-p", "fifo",
            "--no-plots", "--bootstrap-s", "60"]
    code, _out, err = run_tessera(args, capsys, monkeypatch)
    assert code != 0 and "need --speeds learned" in " ".join(err.split())
