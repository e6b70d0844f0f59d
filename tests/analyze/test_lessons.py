"""``tessera lessons``: the locality sweep and the failure study, end to end on small inputs."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tessera.cli.lessons import register
from tessera.lessons import compress_arrivals
from tessera.lessons.failures import failure_study
from tessera.lessons.locality import locality_sweep, parse_thresholds, threshold_label
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tests.builders import RESNET, make_cluster, make_job, make_workload


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    register(app)
    return app


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("0,5m,30m,2h,never", [0, 300, 1800, 7200, math.inf], id="units"),
    pytest.param("120, 90s ,1.5h", [120, 90, 5400], id="plain-seconds"),
])
def test_parse_thresholds(text: str, expected: list[float]) -> None:
    assert parse_thresholds(text) == expected
    assert [threshold_label(v) for v in parse_thresholds("0,5m,2h,never")] == [
        "0", "5 min", "2 h", "never"]


def test_parse_thresholds_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        parse_thresholds("-5")


def test_compress_arrivals() -> None:
    w = make_workload(make_job("a"), make_job("b", submit_s=100))
    assert [j.submit_time_s for j in compress_arrivals(w, 4).jobs] == [0, 25]
    assert compress_arrivals(w, 1.0) is w


def _frag() -> tuple[object, object]:
    c = make_cluster().node("v100", gpus=2, count=2).build()
    v = default_throughputs().throughput(RESNET, resolve_flavor("v100"))
    w = make_workload(
        make_job("a", steps=v * 1000), make_job("b", steps=v * 100),
        make_job("c", steps=v * 1000), make_job("d", gpus=2, steps=v * 500, submit_s=50),
    )
    return c, w


def test_locality_sweep_trades_waiting_for_split_slowdown() -> None:
    c, w = _frag()
    rows = locality_sweep(w, c, [0, 300, math.inf])  # type: ignore[arg-type]
    at_once, later, never = rows
    assert at_once.avg_queue_multi_s < later.avg_queue_multi_s < never.avg_queue_multi_s
    assert at_once.split_gpu_h > 0 and never.split_gpu_h == 0
    assert at_once.useful_utilization <= at_once.utilization
    assert never.wait_fragmentation_s_mean > 0 and never.never_started == 0


def test_failure_study_rows() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    jobs = [make_job(f"j{i}", gpus=1 + i % 4, steps=2e5, submit_s=60 * i, max_retries=3)
            for i in range(30)]
    rows = failure_study(make_workload(*jobs), c, min_gpus=[2], failure_rate=0.5,  # type: ignore[arg-type]
                         validation_s=300, early_window_s=300)
    base, val = rows
    assert base.label == "no validation" and base.saved_gpu_h == 0
    assert val.caught_in_validation > 0 and base.failures == val.failures
    assert val.lost_on_gangs_gpu_h < base.lost_gpu_h
    assert val.saved_gpu_h == pytest.approx(
        base.lost_gpu_h - val.lost_on_gangs_gpu_h - val.validation_gpu_h)


def test_cli_locality_writes_csv_png_and_table(tmp_path: Path) -> None:
    r = CliRunner().invoke(_app(), [
        "lessons", "locality", "-t", "philly", "-c", "p40:64", "--limit", "150",
        "--thresholds", "0,30m", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "locality wait" in r.output and "30 min" in r.output
    rows = list(csv.DictReader((tmp_path / "locality.csv").open()))
    assert [row["threshold"] for row in rows] == ["0", "30 min"]
    assert (tmp_path / "locality.png").stat().st_size > 0


def test_cli_failures_writes_csv_png_and_table(tmp_path: Path) -> None:
    r = CliRunner().invoke(_app(), [
        "lessons", "failures", "-t", "philly", "-c", "p40:64", "--limit", "150",
        "--failure-rate", "0.3", "--min-gpus", "4", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "GPU-h saved" in r.output and "validate ≥4 GPUs" in r.output
    rows = list(csv.DictReader((tmp_path / "failures.csv").open()))
    assert len(rows) == 2
    assert (tmp_path / "failures.png").stat().st_size > 0


def test_cli_rejects_bad_thresholds(tmp_path: Path) -> None:
    r = CliRunner().invoke(_app(), ["lessons", "locality", "--thresholds", "soon",
                                    "--out", str(tmp_path)])
    assert r.exit_code != 0
