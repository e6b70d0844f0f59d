"""The comparison tables carry a legend: every column, ★ and JCT ÷ best say what they mean."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console

from tessera.report.rho import rho_by_length, rho_note
from tessera.report.tables import (
    COLUMNS,
    RESIZE_COLUMN,
    WAIT_COLUMNS,
    comparison_columns,
    comparison_table,
    legend,
    wait_split_table,
)
from tessera.sim.metrics import SimResult


def _text(table: object) -> str:
    out = io.StringIO()
    Console(file=out, width=250).print(table)
    return out.getvalue()


def test_every_column_key_is_a_metric(results: list[SimResult]) -> None:
    d = results[0].as_dict()
    assert all(c.key in d for c in (*COLUMNS, *WAIT_COLUMNS))


def test_comparison_table_explains_its_columns_and_marks(results: list[SimResult]) -> None:
    text = _text(comparison_table(results))
    for c in COLUMNS:
        assert f"{c.header}: {c.meaning}"[:60] in text
    assert "★: the policy with the lowest avg JCT" in text
    assert "JCT ÷ best: avg JCT ÷ the lowest avg JCT" in text
    assert "ρ = JCT ÷ ideal time" in text


def test_wait_table_says_what_it_averages_and_that_reasons_add_up(
        results: list[SimResult]) -> None:
    text = _text(wait_split_table(results))
    assert "Means over all 10 jobs" in text
    assert "awaiting decision: pending before the scheduler's next decision" in text
    assert "the next four columns add up to it" in text
    assert "start wait" in text and "pending job-h" in text


def test_legend_lists_columns_then_marks() -> None:
    text = legend(COLUMNS[:2], [("★", "best")])
    assert text.splitlines() == [f"{COLUMNS[0].header}: {COLUMNS[0].meaning}",
                                 f"{COLUMNS[1].header}: {COLUMNS[1].meaning}", "★: best"]


def test_rho_split_by_job_length(results: list[SimResult]) -> None:
    fifo, rounds = rho_by_length(results)
    assert fifo.jobs == rounds.jobs == 10 and fifo.short_jobs == 5
    # a one-minute job that waits for the next 360 s round has a large ρ; fifo starts it at once
    assert rounds.p95_short > rounds.p95_long and rounds.p95_short > fifo.p95_short
    for r in results:
        for j in r.jobs:
            assert j.ideal_s is not None and j.ftf_rho is not None and j.jct_s is not None
            assert j.ftf_rho * j.ideal_s == pytest.approx(j.jct_s)
    note = rho_note(results)
    assert "over the jobs that run 10 min or more alone (5 of 10)" in note
    assert "every 360 s: hetero_srpt" in note


def test_resize_column_only_when_a_policy_resized(results: list[SimResult]) -> None:
    assert comparison_columns(results) == COLUMNS  # rigid runs keep the usual shape
    assert "resize" not in _text(comparison_table(results)).split("\n")[1]
    resized = replace(results[1], summary=replace(results[1].summary, resizes=7))
    cols = comparison_columns([results[0], resized])
    keys = [c.key for c in cols]
    assert keys.index("resizes") == keys.index("preemptions") + 1
    text = _text(comparison_table([results[0], resized]))
    assert f"{RESIZE_COLUMN.header}: {RESIZE_COLUMN.meaning}"[:60] in text
