"""``--json`` on the commands that print a table: one JSON document on stdout, nothing else."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tessera.cli import app

runner = CliRunner()


def test_traces_json() -> None:
    r = runner.invoke(app, ["traces", "--json"])
    assert r.exit_code == 0, r.output
    names = {t["name"]: t for t in json.loads(r.stdout)}
    assert names["philly"]["data"] == "bundled" and "description" in names["philly"]


def test_policies_json() -> None:
    r = runner.invoke(app, ["policies", "--json"])
    assert r.exit_code == 0, r.output
    assert {"fifo", "hetero_srpt"} <= {p["policy"] for p in json.loads(r.stdout)}


def test_lessons_locality_json(tmp_path: Path) -> None:
    r = runner.invoke(app, ["lessons", "locality", "-t", "philly", "-c", "p40:64", "--limit",
                            "60", "--thresholds", "0,never", "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [row["threshold"] for row in data["rows"]] == ["0", "never"]
    assert data["rows"][1]["threshold_s"] is None  # never: JSON has no infinity
    assert str(tmp_path / "locality.csv") in data["files"]


def test_simulate_sia_calibration_slows_elastic_jobs(tmp_path: Path) -> None:
    """``--sia-calibration`` runs a Sia workload as Sia's simulator does: the same jobs take
    longer (cifar10 1.8×, the rest 1.2× slower than profiled)."""
    args = ["simulate", "-t", "sia-philly-1", "-c", "sia-64", "--throughputs", "sia",
            "-p", "sia", "--round-s", "60", "--limit", "12", "--no-plots", "--json"]
    avg = []
    for extra in ([], ["--sia-calibration"]):
        r = runner.invoke(app, [*args, *extra, "--out", str(tmp_path / str(len(extra)))])
        assert r.exit_code == 0, r.output
        res = json.loads(r.stdout)["results"]["sia"]
        assert res["succeeded"] == 12 and res["resizes"] > 0
        avg.append(res["avg_jct_s"])
    assert avg[1] > avg[0] * 1.1
