"""``tessera lessons`` tables a reader can check (issue 31, first hour): every column has a
legend line, the GPU-hour columns add up, and split GPU-hours under ``never`` say whose they are."""

from __future__ import annotations

import math
import re

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.lessons.failures import FAILURE_COLUMNS, failure_study
from tessera.lessons.locality import LOCALITY_COLUMNS, locality_sweep, split_note
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tests.builders import RESNET, make_cluster, make_job, make_workload

runner = CliRunner()


def test_failure_rows_add_up() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    jobs = [make_job(f"j{i}", gpus=1 + i % 4, steps=2e5, submit_s=60 * i, max_retries=3)
            for i in range(30)]
    rows = failure_study(make_workload(*jobs), c, min_gpus=[2, 4], failure_rate=0.5,
                         validation_s=300, early_window_s=300)
    base = rows[0]
    assert base.cost_gpu_h == pytest.approx(base.lost_gpu_h) and base.saved_gpu_h == 0
    assert any(r.validation_gpu_h > 0 for r in rows[1:])
    for r in rows:
        assert r.lost_gpu_h == pytest.approx(r.lost_on_gangs_gpu_h + r.lost_in_validation_gpu_h)
        assert r.cost_gpu_h == pytest.approx(r.lost_on_gangs_gpu_h + r.validation_gpu_h)
        assert r.saved_gpu_h == pytest.approx(base.cost_gpu_h - r.cost_gpu_h)
        assert r.lost_in_validation_gpu_h <= r.validation_gpu_h + 1e-9


def _table_rows(text: str) -> dict[str, dict[str, str]]:
    """The printed table's rows, by the first cell, as {header: cell}."""
    lines = [ln for ln in text.splitlines() if ln.startswith(("┃", "│"))]
    head = [h.strip() for h in lines[0].strip("┃").split("┃")]
    out = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("│").split("│")]
        out[cells[0]] = dict(zip(head, cells, strict=True))
    return out


def _num(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_lessons_failures_prints_a_legend_and_columns_that_add_up(tmp_path: object) -> None:
    r = runner.invoke(app, ["lessons", "failures", "-t", "philly", "-c", "philly", "--limit",
                            "300", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    for header, meaning in FAILURE_COLUMNS:
        assert f"{header}: {meaning}" in r.stdout
    rows = _table_rows(r.stdout)
    base = rows["no validation"]
    assert len(rows) == 3
    for row in rows.values():  # one decimal printed: sums agree to rounding
        assert _num(row["GPU-h lost"]) == pytest.approx(
            _num(row["lost on gangs"]) + _num(row["lost in validation"]), abs=0.11)
        assert _num(row["cost GPU-h"]) == pytest.approx(
            _num(row["lost on gangs"]) + _num(row["validation GPU-h"]), abs=0.11)
        assert _num(row["GPU-h saved"]) == pytest.approx(
            _num(base["cost GPU-h"]) - _num(row["cost GPU-h"]), abs=0.11)


def test_locality_split_columns_add_up_and_never_says_whose_they_are() -> None:
    c = make_cluster().node("v100", gpus=2, count=3).build()
    v = default_throughputs().throughput(RESNET, resolve_flavor("v100"))
    w = make_workload(
        make_job("a", steps=v * 1000), make_job("b", steps=v * 100),
        make_job("c", steps=v * 1000), make_job("d", gpus=2, steps=v * 500, submit_s=50),
        make_job("big", gpus=4, steps=v * 400, submit_s=60),
    )
    rows = locality_sweep(w, c, [0, math.inf])
    at_once, never = rows
    for r in rows:
        assert r.split_gpu_h == pytest.approx(r.too_big_gpu_h + r.split_by_wait_gpu_h)
    assert never.too_big_gpu_h > 0 and never.split_by_wait_gpu_h == pytest.approx(0, abs=1e-3)
    assert at_once.split_by_wait_gpu_h > 0
    note = split_note(rows, w, c)
    assert note is not None
    assert "larger than any server" in note and f"{never.split_gpu_h:,.0f}" in note
    assert any(re.match(r"too big GPU-h$", h) for h, _m in LOCALITY_COLUMNS)
