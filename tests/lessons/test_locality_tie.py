"""``tessera lessons locality`` says why its rows are identical when they are."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from typer.testing import CliRunner

from tessera.cli.lessons import register
from tessera.lessons.locality import LOCALITY_COLUMNS, locality_sweep, why_rows_tie
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tests.builders import RESNET, make_cluster, make_job, make_workload

V100 = default_throughputs().throughput(RESNET, resolve_flavor("v100"))


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    register(app)
    return app


def test_idle_cluster_ties_every_threshold_and_says_why() -> None:
    # Two 4-GPU servers, one small gang at a time: each finds a free server at once. The 8-GPU
    # gang is larger than any server, so it is split at once whatever the threshold.
    c = make_cluster().node("v100", gpus=4, count=2).build()
    w = make_workload(make_job("a", gpus=2, steps=V100 * 100),
                      make_job("b", gpus=4, steps=V100 * 100, submit_s=1000),
                      make_job("big", gpus=8, steps=V100 * 100, submit_s=2000))
    rows = locality_sweep(w, c, [0, 1800, math.inf])
    assert len({(r.avg_queue_s, r.split_gpu_h, r.utilization) for r in rows}) == 1
    text = why_rows_tie(rows, w, c)
    assert text is not None
    assert text.startswith("All 3 thresholds give the same result: no gang ever waited")
    assert "the gang larger than any server (8 GPUs; servers hold at most 4) is split" in text
    assert "split GPU-hours are theirs" in text and "--arrival-scale" in text


def test_no_explanation_when_thresholds_matter() -> None:
    # a and c hold one GPU on each server when d (2 GPUs) arrives: d waits for locality or is
    # split, so the thresholds differ.
    c = make_cluster().node("v100", gpus=2, count=2).build()
    w = make_workload(
        make_job("a", steps=V100 * 1000), make_job("b", steps=V100 * 100),
        make_job("c", steps=V100 * 1000), make_job("d", gpus=2, steps=V100 * 500, submit_s=50),
    )
    rows = locality_sweep(w, c, [0, math.inf])
    assert why_rows_tie(rows, w, c) is None


def test_cli_prints_the_legend_and_the_reason(tmp_path: Path) -> None:
    r = CliRunner().invoke(_app(), [
        "lessons", "locality", "-t", "philly", "-c", "philly", "--limit", "60",
        "--thresholds", "0,never", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "All 2 thresholds give the same result: no gang ever waited for locality" in r.output
    for header, meaning in LOCALITY_COLUMNS:
        assert f"{header}: {meaning}"[:40] in r.output
