"""The time axes end where the data ends: at the last job's end, not the last idle sample."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tessera.report.plots import first_submission_s, plot_timeseries, time_axis_limit_h
from tessera.sim.metrics import Sample, SimResult


def _with_samples(r: SimResult, samples: list[Sample]) -> SimResult:
    return dataclasses.replace(r, samples=(*r.samples, *samples))


def _last_end_h(results: list[SimResult]) -> float:
    start = first_submission_s(results)
    return max(j.finish_s for r in results for j in r.jobs if j.finish_s is not None) - start


def test_limit_is_the_last_job_end_across_policies(results: list[SimResult]) -> None:
    last = _last_end_h(results) / 3600
    assert time_axis_limit_h(results) == pytest.approx(last)
    # a stale completion far in the future made the run sample an idle cluster for days
    idle = [Sample(3600.0 * h, 0, 0, 0) for h in range(100, 2000, 100)]
    padded = [_with_samples(results[0], idle), results[1]]
    assert padded[0].samples[-1].time_s / 3600 > 1000
    assert time_axis_limit_h(padded) == pytest.approx(last)


def test_limit_keeps_work_left_at_a_horizon(results: list[SimResult]) -> None:
    late = _last_end_h(results) + 7200.0
    padded = [_with_samples(results[0], [Sample(late, 0, 3, 0)]), results[1]]
    assert time_axis_limit_h(padded) == pytest.approx(late / 3600)


def test_plot_writes_a_png(results: list[SimResult], tmp_path: Path) -> None:
    p = plot_timeseries(results, 10, tmp_path / "u.png")
    assert p.stat().st_size > 0
