"""Job-level statistics: counts, sizes, durations, tenants, statuses, arrival patterns.

Everything is a polars aggregation over the canonical ``jobs`` frame (:mod:`.trace`); the results
are frozen dataclasses with units in their names. Two views of job size matter and routinely
disagree: **by count** (most jobs are 1-GPU) and **by GPU-time** (most GPU-hours go to the few
large jobs). Philly is the classic example: 93 % of jobs use one GPU, yet 5–8-GPU jobs take
48 % of the GPU-time.

Percentiles use linear interpolation (pandas' default), so they match the statistics quoted in
the data READMEs. Every result can flatten itself into ``metrics()``: ``{key: value}`` pairs
that :mod:`.published` compares against the papers (percentages are 0–100, keys end in
``_pct``).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tessera.analyze.trace import Clock, Trace

DAY_S = 86_400.0
SIZE_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("0", 0.0, 0.0),
    ("<1", 1e-9, 0.999999),
    ("1", 1.0, 1.0),
    ("2-4", 2.0, 4.0),
    ("5-8", 5.0, 8.0),
    ("9-16", 9.0, 16.0),
    ("17-64", 17.0, 64.0),
    (">64", 65.0, float("inf")),
)
"""(label, lowest, highest GPU request) of the size classes used for GPU-time shares."""
TOP_TENANTS = 8
"""Tenants shown individually in arrival breakdowns; the rest are summed as ``other``."""


@dataclass(frozen=True, slots=True)
class SizeRow:
    """One job-size class: how many jobs, and how much GPU-time, it accounts for."""

    label: str
    jobs: int
    jobs_pct: float
    gpu_hours: float | None
    gpu_time_pct: float | None


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a non-negative duration-like column, in seconds."""

    count: int
    mean_s: float
    min_s: float
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float
    over_1_day_pct: float


@dataclass(frozen=True, slots=True)
class ShareRow:
    """A category's share of jobs (and of GPU-time where durations are known)."""

    label: str
    jobs: int
    jobs_pct: float
    gpu_hours: float | None = None
    gpu_time_pct: float | None = None


@dataclass(frozen=True, slots=True)
class Arrivals:
    """When jobs arrive.

    ``clock`` says whether hours and weekdays are real local time (Philly) or counted from the
    trace's first submission (all other traces: their origin's time of day is not published).
    """

    clock: Clock
    by_hour: tuple[int, ...]
    by_weekday: tuple[int, ...]
    per_day: tuple[int, ...]
    first_day: str | None
    by_hour_per_tenant: dict[str, tuple[int, ...]]
    per_day_per_tenant: dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class JobStats:
    """Everything :func:`job_stats` measures on one trace's jobs."""

    job_count: int
    span_days: float | None
    mean_gpus: float | None
    gpu_hours: float | None
    sizes: tuple[SizeRow, ...]
    size_buckets: tuple[SizeRow, ...]
    duration: Distribution | None
    wait: Distribution | None
    tenants: tuple[ShareRow, ...]
    status: tuple[ShareRow, ...]
    arrivals: Arrivals | None

    def metrics(self) -> dict[str, float]:
        """Flat ``{key: value}`` view used by the published-vs-measured comparison."""
        m: dict[str, float] = {"jobs.count": float(self.job_count)}
        for key, value in (
            ("jobs.span_days", self.span_days),
            ("jobs.mean_gpus", self.mean_gpus),
            ("jobs.gpu_hours", self.gpu_hours),
        ):
            if value is not None:
                m[key] = value
        for prefix, sized in (("size", self.sizes), ("size_bucket", self.size_buckets)):
            for r in sized:
                m[f"{prefix}.jobs_pct.{r.label}"] = r.jobs_pct
                if r.gpu_time_pct is not None:
                    m[f"{prefix}.gpu_time_pct.{r.label}"] = r.gpu_time_pct
        multi = [r for r in self.sizes if r.label.isdigit() and int(r.label) > 8]
        if self.sizes:
            m["size.jobs_pct.>8"] = sum(r.jobs_pct for r in multi)
            if all(r.gpu_time_pct is not None for r in multi):
                m["size.gpu_time_pct.>8"] = sum(r.gpu_time_pct or 0.0 for r in multi)
        for prefix, dist in (("duration", self.duration), ("wait", self.wait)):
            if dist is not None:
                for f in ("mean_s", "min_s", "p50_s", "p90_s", "p99_s", "max_s", "over_1_day_pct"):
                    m[f"{prefix}.{f}"] = getattr(dist, f)
        for prefix, shares in (("tenant", self.tenants), ("status", self.status)):
            for share in shares:
                m[f"{prefix}.jobs.{share.label}"] = float(share.jobs)
                m[f"{prefix}.jobs_pct.{share.label}"] = share.jobs_pct
                if share.gpu_hours is not None:
                    m[f"{prefix}.gpu_hours.{share.label}"] = share.gpu_hours
        return m


def distribution(values: pl.Series) -> Distribution | None:
    """Mean, extremes and p50/p90/p99 of a duration column (nulls ignored)."""
    values = values.drop_nulls().cast(pl.Float64)
    if values.len() == 0:
        return None
    s = values.to_frame("v").select(
        n=pl.len(),
        mean=pl.col("v").mean(),
        lo=pl.col("v").min(),
        p50=pl.col("v").quantile(0.5, "linear"),
        p90=pl.col("v").quantile(0.9, "linear"),
        p99=pl.col("v").quantile(0.99, "linear"),
        hi=pl.col("v").max(),
        day=(pl.col("v") > DAY_S).mean() * 100,
    ).row(0, named=True)
    return Distribution(
        count=int(s["n"]),
        mean_s=float(s["mean"]),
        min_s=float(s["lo"]),
        p50_s=float(s["p50"]),
        p90_s=float(s["p90"]),
        p99_s=float(s["p99"]),
        max_s=float(s["hi"]),
        over_1_day_pct=float(s["day"]),
    )


def _shares(jobs: pl.DataFrame, key: pl.Expr, sort_by_jobs: bool = True) -> tuple[ShareRow, ...]:
    """Jobs and GPU-time per category of ``key`` (a string expression)."""
    timed = "gpu_time_s" in jobs.columns
    aggs = [pl.len().alias("jobs")]
    if timed:
        aggs.append(pl.col("gpu_time_s").sum().alias("gpu_s"))
    g = jobs.group_by(key.alias("label")).agg(aggs).with_columns(
        jobs_pct=pl.col("jobs") / pl.col("jobs").sum() * 100
    )
    if timed:
        g = g.with_columns(gpu_time_pct=pl.col("gpu_s") / pl.col("gpu_s").sum() * 100)
    g = g.sort(["jobs", "label"], descending=[True, False]) if sort_by_jobs else g.sort("label")
    return tuple(
        ShareRow(
            label=str(r["label"]),
            jobs=int(r["jobs"]),
            jobs_pct=float(r["jobs_pct"]),
            gpu_hours=float(r["gpu_s"]) / 3600 if timed else None,
            gpu_time_pct=float(r["gpu_time_pct"]) if timed else None,
        )
        for r in g.iter_rows(named=True)
    )


def _size_rows(jobs: pl.DataFrame) -> tuple[SizeRow, ...]:
    """One row per distinct request: ``<1`` (fractional), then whole GPU counts ascending."""
    label = (
        pl.when(pl.col("gpu_request") < 1)
        .then(pl.when(pl.col("gpu_request") == 0).then(pl.lit("0")).otherwise(pl.lit("<1")))
        .otherwise(pl.col("num_gpus").cast(pl.Utf8))
    )
    order = pl.when(pl.col("gpu_request") < 1).then(pl.col("gpu_request")).otherwise(
        pl.col("num_gpus").cast(pl.Float64)
    )
    rows = _shares(jobs, label, sort_by_jobs=False)
    rank = dict(
        jobs.group_by(label.alias("l")).agg(order.min().alias("o")).iter_rows()
    )
    return tuple(
        SizeRow(r.label, r.jobs, r.jobs_pct, r.gpu_hours, r.gpu_time_pct)
        for r in sorted(rows, key=lambda r: rank[r.label])
    )


def _bucket_rows(jobs: pl.DataFrame) -> tuple[SizeRow, ...]:
    """Jobs and GPU-time per size class of :data:`SIZE_BUCKETS` (empty classes omitted)."""
    expr = pl.lit(None, pl.Utf8)
    for label, lo, hi in reversed(SIZE_BUCKETS):
        expr = pl.when(pl.col("gpu_request").is_between(lo, hi)).then(pl.lit(label)).otherwise(expr)
    rows = {r.label: r for r in _shares(jobs, expr)}
    return tuple(
        SizeRow(r.label, r.jobs, r.jobs_pct, r.gpu_hours, r.gpu_time_pct)
        for label, _, _ in SIZE_BUCKETS
        if (r := rows.get(label)) is not None
    )


def _top_tenants(jobs: pl.DataFrame) -> pl.Expr:
    top = jobs.group_by("tenant").len().sort(["len", "tenant"], descending=[True, False])
    names = top["tenant"].head(TOP_TENANTS).to_list()
    return pl.when(pl.col("tenant").is_in(names)).then(pl.col("tenant")).otherwise(pl.lit("other"))


def _counts(df: pl.DataFrame, key: str, n: int) -> tuple[int, ...]:
    """Dense counts 0..n-1 of an integer column (missing bins are 0)."""
    c = df.group_by(key).len()
    dense = pl.DataFrame({key: pl.arange(0, n, eager=True).cast(c[key].dtype)})
    return tuple(dense.join(c, on=key, how="left")["len"].fill_null(0).cast(pl.Int64).to_list())


def arrivals(trace: Trace) -> Arrivals | None:
    """Diurnal, weekly and daily arrival counts, overall and for the largest tenants."""
    jobs = trace.jobs
    if jobs is None or "submit_time_s" not in jobs.columns:
        return None
    if "submit_at" in jobs.columns:
        t = jobs.select(
            hour=pl.col("submit_at").dt.hour().cast(pl.Int64),
            weekday=pl.col("submit_at").dt.weekday().cast(pl.Int64) - 1,  # Monday = 0
            day=(pl.col("submit_at").dt.date() - pl.col("submit_at").dt.date().min())
            .dt.total_days()
            .cast(pl.Int64),
        )
        first_day = str(jobs["submit_at"].min().date())  # type: ignore[union-attr]
    else:
        s = pl.col("submit_time_s")
        t = jobs.select(
            hour=((s // 3600) % 24).cast(pl.Int64),
            weekday=((s // DAY_S) % 7).cast(pl.Int64),
            day=(s // DAY_S).cast(pl.Int64),
        )
        first_day = None
    n_days = int(t.select(pl.col("day").max()).item() or 0) + 1
    per_hour_tenant: dict[str, tuple[int, ...]] = {}
    per_day_tenant: dict[str, tuple[int, ...]] = {}
    if "tenant" in jobs.columns:
        t = t.with_columns(tenant=jobs.select(_top_tenants(jobs))["tenant"])
        for (name,), part in t.partition_by("tenant", as_dict=True, maintain_order=True).items():
            per_hour_tenant[str(name)] = _counts(part, "hour", 24)
            per_day_tenant[str(name)] = _counts(part, "day", n_days)
        order = sorted(per_hour_tenant, key=lambda k: (k == "other", -sum(per_hour_tenant[k])))
        per_hour_tenant = {k: per_hour_tenant[k] for k in order}
        per_day_tenant = {k: per_day_tenant[k] for k in order}
    return Arrivals(
        clock=trace.clock,
        by_hour=_counts(t, "hour", 24),
        by_weekday=_counts(t, "weekday", 7),
        per_day=_counts(t, "day", n_days),
        first_day=first_day,
        by_hour_per_tenant=per_hour_tenant,
        per_day_per_tenant=per_day_tenant,
    )


def job_stats(trace: Trace) -> JobStats | None:
    """All job-level statistics of a trace; None when it has no job table."""
    jobs = trace.jobs
    if jobs is None:
        return None
    sized = "gpu_request" in jobs.columns
    timed = "gpu_time_s" in jobs.columns
    span = None
    if "submit_time_s" in jobs.columns:
        s = pl.col("submit_time_s")
        span = float(jobs.select(s.max() - s.min()).item()) / DAY_S
    return JobStats(
        job_count=jobs.height,
        span_days=span,
        mean_gpus=float(jobs["gpu_request"].mean()) if sized else None,  # type: ignore[arg-type]
        gpu_hours=float(jobs["gpu_time_s"].sum()) / 3600 if timed else None,
        sizes=_size_rows(jobs) if sized else (),
        size_buckets=_bucket_rows(jobs) if sized else (),
        duration=distribution(jobs["duration_s"]) if "duration_s" in jobs.columns else None,
        wait=distribution(jobs["wait_s"]) if "wait_s" in jobs.columns else None,
        tenants=_shares(jobs, pl.col("tenant")) if "tenant" in jobs.columns else (),
        status=_shares(jobs, pl.col("status").fill_null("unknown"))
        if "status" in jobs.columns
        else (),
        arrivals=arrivals(trace),
    )
