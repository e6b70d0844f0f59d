"""SenseTime Helios (SC'21): per-cluster summaries and daily per-VC GPU capacity.

The per-job Helios logs are not stored, only what the authors derived from them: one summary row
per cluster (Venus, Earth, Saturn, Uranus) plus their ``total`` row, and the GPUs each virtual
cluster (VC) held per day for Venus and Earth. What we *can* measure honestly is whether the
four cluster rows re-aggregate to the published totals: sums for counts, GPU-job-weighted means
for averages and shares, and GPU-time sums for the GPU-time status split. Medians do not
combine across clusters, so the overall median runtime is reported as not reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tessera.analyze.tables import INTEGER, NUMBER, TEXT, parse_datetime, read_table
from tessera.analyze.trace import Trace

SUMMARY_FILE = "helios_cluster_summary.csv"
CAPACITY_FILES = {"Venus": "venus_cluster_gpu_number.csv", "Earth": "earth_cluster_gpu_number.csv"}

_SUMMARY_COLUMNS = {
    "id": TEXT,
    "gpu_num": INTEGER,
    "job_num": INTEGER,
    "gpu_job_num": INTEGER,
    "avg_run_time_gpu": NUMBER,
    "avg_que_time_gpu": NUMBER,
    "avg_gpu_num": NUMBER,
    "med_run_time_gpu": NUMBER,
    "complete_rate_gpu": NUMBER,
    "cancel_rate_gpu": NUMBER,
    "fail_rate_gpu": NUMBER,
    "complete_gpu_time": NUMBER,
    "cancel_gpu_time": NUMBER,
    "fail_gpu_time": NUMBER,
}


def _capacity(path: Path, cluster: str) -> pl.DataFrame:
    """Daily GPUs per VC as a long frame: date, cluster, vc, gpus (the ``total`` column dropped)."""
    with path.open(encoding="utf-8") as f:
        header = f.readline().strip().split(",")
    columns = {"date": TEXT} | {c: INTEGER for c in header[1:]}
    df = read_table(path, columns)
    df = df.with_columns(date=parse_datetime(path, df, "date", "%Y-%m-%d").dt.date())
    vcs = [c for c in header[1:] if c != "total"]
    return df.unpivot(index="date", on=vcs, variable_name="vc", value_name="gpus").with_columns(
        cluster=pl.lit(cluster)
    )


def load(path: Path) -> Trace:
    """Helios: the folder (summary + daily capacities), the summary file, or one capacity file."""
    if path.is_file() and path.name != SUMMARY_FILE and path.name.endswith("_gpu_number.csv"):
        cluster = path.name.split("_")[0].capitalize()
        summary_path, capacity_paths = None, {cluster: path}
    else:
        summary_path = path / SUMMARY_FILE if path.is_dir() else path
        folder = summary_path.parent
        capacity_paths = {
            c: folder / f for c, f in CAPACITY_FILES.items() if (folder / f).is_file()
        }
    summary = (
        read_table(summary_path, _SUMMARY_COLUMNS).drop("__row") if summary_path else None
    )
    capacity = (
        pl.concat([_capacity(p, c) for c, p in capacity_paths.items()])
        if capacity_paths
        else None
    )
    return Trace(
        name="helios",
        format="helios",
        paths=tuple(p for p in (summary_path, *capacity_paths.values()) if p is not None),
        summary=summary,
        capacity=capacity,
        notes=(
            "Derived summaries only (per-job logs not stored): totals are re-aggregated from "
            "the four cluster rows and compared with the authors' total row.",
        ),
    )


@dataclass(frozen=True, slots=True)
class HeliosTotals:
    """Whole-datacenter figures re-aggregated from the per-cluster rows."""

    clusters: tuple[str, ...]
    gpus: int
    jobs: int
    gpu_jobs: int
    mean_gpus_per_gpu_job: float
    mean_runtime_gpu_s: float
    mean_queue_gpu_s: float
    status_share_by_count: dict[str, float]
    status_share_by_gpu_time: dict[str, float]
    daily_capacity_range: dict[str, tuple[int, int]]

    def metrics(self) -> dict[str, float]:
        """Flat metric keys (``helios.*``) for the published-vs-measured comparison."""
        out = {
            "helios.gpus": float(self.gpus),
            "helios.jobs": float(self.jobs),
            "helios.gpu_jobs": float(self.gpu_jobs),
            "helios.mean_gpus": self.mean_gpus_per_gpu_job,
            "helios.mean_runtime_s": self.mean_runtime_gpu_s,
            "helios.mean_queue_s": self.mean_queue_gpu_s,
        }
        for kind, shares in (
            ("status_count_pct", self.status_share_by_count),
            ("status_gpu_time_pct", self.status_share_by_gpu_time),
        ):
            out |= {f"helios.{kind}.{k}": 100 * v for k, v in shares.items()}
        for cluster, (lo, hi) in self.daily_capacity_range.items():
            out[f"helios.capacity.{cluster.lower()}.min_gpus"] = float(lo)
            out[f"helios.capacity.{cluster.lower()}.max_gpus"] = float(hi)
        return out


def totals(trace: Trace) -> HeliosTotals | None:
    """Re-aggregate the cluster rows (every row except ``total``); None if no summary."""
    if trace.summary is None:
        return None
    rows = trace.summary.filter(pl.col("id") != "total")
    w = pl.col("gpu_job_num")

    def weighted(column: str) -> pl.Expr:
        return (pl.col(column) * w).sum() / w.sum()

    agg = rows.select(
        gpus=pl.col("gpu_num").sum(),
        jobs=pl.col("job_num").sum(),
        gpu_jobs=w.sum(),
        mean_gpus=weighted("avg_gpu_num"),
        mean_run=weighted("avg_run_time_gpu"),
        mean_queue=weighted("avg_que_time_gpu"),
        completed=weighted("complete_rate_gpu"),
        cancelled=weighted("cancel_rate_gpu"),
        failed=weighted("fail_rate_gpu"),
        t_completed=pl.col("complete_gpu_time").sum(),
        t_cancelled=pl.col("cancel_gpu_time").sum(),
        t_failed=pl.col("fail_gpu_time").sum(),
    ).row(0, named=True)
    gpu_time = agg["t_completed"] + agg["t_cancelled"] + agg["t_failed"]
    return HeliosTotals(
        clusters=tuple(rows["id"].to_list()),
        gpus=int(agg["gpus"]),
        jobs=int(agg["jobs"]),
        gpu_jobs=int(agg["gpu_jobs"]),
        mean_gpus_per_gpu_job=float(agg["mean_gpus"]),
        mean_runtime_gpu_s=float(agg["mean_run"]),
        mean_queue_gpu_s=float(agg["mean_queue"]),
        status_share_by_count={
            "completed": float(agg["completed"]),
            "cancelled": float(agg["cancelled"]),
            "failed": float(agg["failed"]),
        },
        status_share_by_gpu_time={
            "completed": agg["t_completed"] / gpu_time,
            "cancelled": agg["t_cancelled"] / gpu_time,
            "failed": agg["t_failed"] / gpu_time,
        },
        daily_capacity_range=capacity_ranges(trace),
    )


def capacity_ranges(trace: Trace) -> dict[str, tuple[int, int]]:
    """Smallest and largest daily GPU total per cluster (sum over its VCs)."""
    if trace.capacity is None:
        return {}
    daily = trace.capacity.group_by("cluster", "date").agg(pl.col("gpus").sum())
    ranges = daily.group_by("cluster").agg(lo=pl.col("gpus").min(), hi=pl.col("gpus").max())
    return {
        str(r["cluster"]): (int(r["lo"]), int(r["hi"]))
        for r in ranges.sort("cluster").iter_rows(named=True)
    }
