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
    r = runner.invoke(app, ["policies", "hetero_pack", "--json"])
    assert r.exit_code == 0, r.output
    options = {o["option"]: o for o in json.loads(r.stdout)}
    assert options["min_gain"]["default"] == "0.1" and options["min_gain"]["description"]


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


def test_sia_calibration_tunes_batches_from_m0_for_elastic_policies_only(tmp_path: Path) -> None:
    """Under ``--sia-calibration`` elastic policies run Sia's adaptive jobs from their model's
    ``M0`` (as ``bench_elastic.py`` does), rigid ones at the trace's batch: one run of both
    gives what each gets alone on its own workload."""
    from tessera.model.cluster import load_cluster
    from tessera.perf.tables import load_throughputs
    from tessera.sched.core.settings import SchedulerSettings
    from tessera.sim.config import SimConfig
    from tessera.sim.engine import simulate
    from tessera.workload import load_trace
    from tessera.workload.elastic import sia_calibrated, tuned_from_m0

    r = runner.invoke(app, ["simulate", "-t", "sia-philly-1", "-c", "sia-64", "--throughputs",
                            "sia", "-p", "sia,fifo", "--round-s", "60", "--limit", "12",
                            "--sia-calibration", "--workers", "1", "--no-plots", "--json",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["results"]
    cluster, table = load_cluster("sia-64"), load_throughputs("sia")
    base = sia_calibrated(load_trace("sia-philly-1", limit=12, throughputs=table))
    cfg = SimConfig(scheduler=SchedulerSettings(round_s=60))
    tuned = simulate(tuned_from_m0(base), cluster, "sia", cfg, table).summary.avg_jct_s
    plain = simulate(base, cluster, "sia", cfg, table).summary.avg_jct_s
    rigid = simulate(base, cluster, "fifo", cfg, table).summary.avg_jct_s
    assert tuned != plain
    assert got["sia"]["avg_jct_s"] == tuned
    assert got["fifo"]["avg_jct_s"] == rigid
