"""Statistics on small hand-built traces, where every number can be checked by hand."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from tessera.analyze.cluster import inventory, sharing_mix
from tessera.analyze.published import Evidence, Outcome, PublishedFigure, compare
from tessera.analyze.stats import distribution, job_stats
from tessera.analyze.trace import Clock, Trace


def _trace(jobs: pl.DataFrame, clock: Clock = Clock.RELATIVE) -> Trace:
    return Trace(name="t", format="test", paths=(Path("t.csv"),), clock=clock, jobs=jobs)


def test_size_shares_by_count_and_by_gpu_time() -> None:
    # Nine 1-GPU jobs of 1 h and one 8-GPU job of 1 h: 90 % of jobs, but 9/17 of GPU-time.
    jobs = pl.DataFrame({"num_gpus": [1] * 9 + [8], "duration_s": [3600.0] * 10}).with_columns(
        gpu_request=pl.col("num_gpus").cast(pl.Float64),
        gpu_time_s=pl.col("duration_s") * pl.col("num_gpus"),
    )
    s = job_stats(_trace(jobs))
    assert s is not None
    rows = {r.label: r for r in s.sizes}
    assert rows["1"].jobs_pct == pytest.approx(90)
    assert rows["8"].gpu_time_pct == pytest.approx(800 / 17)
    assert s.gpu_hours == pytest.approx(17)
    assert [b.label for b in s.size_buckets] == ["1", "5-8"]


def test_percentiles_interpolate_linearly_like_pandas() -> None:
    d = distribution(pl.Series([1.0, 2.0, 3.0, 4.0, 100_000.0]))
    assert d is not None
    assert (d.p50_s, d.p90_s) == (3.0, pytest.approx(4 + 0.6 * 99_996))
    assert d.over_1_day_pct == pytest.approx(20)


def test_wall_clock_arrivals_use_real_hours_and_weekdays() -> None:
    submit = [datetime(2017, 10, 2, 9), datetime(2017, 10, 2, 9, 30), datetime(2017, 10, 8, 23)]
    jobs = pl.DataFrame({"submit_at": submit, "tenant": ["a", "a", "b"]}).with_columns(
        submit_time_s=(pl.col("submit_at") - pl.col("submit_at").min()).dt.total_seconds()
    )
    s = job_stats(_trace(jobs, Clock.WALL))
    assert s is not None and s.arrivals is not None
    assert s.arrivals.by_hour[9] == 2 and s.arrivals.by_hour[23] == 1
    assert s.arrivals.by_weekday == (2, 0, 0, 0, 0, 0, 1)  # 2017-10-02 was a Monday
    assert s.arrivals.per_day == (2, 0, 0, 0, 0, 0, 1)
    assert s.arrivals.by_hour_per_tenant["a"][9] == 2


def test_sharing_mix_counts_fractional_requests_by_their_fraction() -> None:
    jobs = pl.DataFrame(
        {"num_gpus": [0, 1, 1, 8], "gpu_milli": [0, 500, 1000, 1000],
         "gpu_type": [None, "T4", None, "V100M32|G2"]}
    ).with_columns(
        gpu_request=pl.when(pl.col("gpu_milli") < 1000)
        .then(pl.col("gpu_milli") / 1000)
        .otherwise(pl.col("num_gpus").cast(pl.Float64))
    )
    mix = sharing_mix(_trace(jobs))
    assert mix is not None
    assert mix.tasks_pct["fractional"] == 25
    assert mix.gpu_requests_pct["fractional"] == pytest.approx(100 * 0.5 / 9.5)
    assert mix.constrained_gpu_tasks_pct == pytest.approx(200 / 3)
    assert mix.constraint_types == {"T4": 1, "V100M32": 1, "G2": 1}


def test_inventory_groups_cpu_only_machines() -> None:
    nodes = pl.DataFrame(
        {"node": ["a", "b", "c"], "gpu_type": ["T4", None, "T4"], "num_gpus": [2, 0, 4]}
    )
    inv = inventory(Trace(name="n", format="test", paths=(), nodes=nodes))
    assert inv is not None
    assert (inv.nodes, inv.gpu_nodes, inv.gpus) == (3, 2, 6)
    assert inv.by_type[0].gpus_per_node == (2, 4)


FIG = PublishedFigure(("test",), "x", 10.0, "%", "src", Evidence.COMPUTED, "m", tolerance=0.1)


@pytest.mark.parametrize(
    ("metrics", "outcome", "verdict"),
    [
        ({"m": 10.05}, Outcome.REPRODUCED, "reproduced"),
        ({"m": 11.0}, Outcome.DIFFERS, "differs by +1 %"),
        ({}, Outcome.NOT_REPRODUCIBLE, "not reproducible: this input has no 'm'"),
    ],
    ids=["within tolerance", "outside tolerance", "metric absent"],
)
def test_compare_outcomes(metrics: dict[str, float], outcome: Outcome, verdict: str) -> None:
    (c,) = compare((FIG,), metrics, "test", "t")
    assert c.outcome is outcome
    assert c.describe().startswith(verdict)
    assert compare((FIG,), metrics, "other-format", "t") == ()
