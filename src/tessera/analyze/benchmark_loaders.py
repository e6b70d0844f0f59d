"""Loaders for scheduler-benchmark workloads: Gavel ``.trace`` files and Sia workloads.

These are inputs other schedulers were evaluated on, not production logs: Gavel traces give
steps and GPU counts (no durations), Sia workloads keep real submit times but synthetic models
and GPU counts. Both are sorted by arrival, so a decrease is a "timestamps out of order" error.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tessera.analyze.loaders import with_gpu_time
from tessera.analyze.tables import (
    INTEGER,
    NUMBER,
    ROW,
    TEXT,
    check_min,
    check_non_decreasing,
    read_table,
)
from tessera.analyze.trace import Clock, Trace
from tessera.errors import TraceFormatError
from tessera.workload.readers.gavel_tsv import COLUMNS as GAVEL_TSV_COLUMNS

# --- Gavel 10-column TSV ---------------------------------------------------------------------

GAVEL_COLUMNS = tuple(c.lower() for c in GAVEL_TSV_COLUMNS)  # the reader's layout


def _gavel_file(path: Path) -> pl.DataFrame:
    df = read_table(
        path,
        {
            "job_type": TEXT,
            "total_steps": INTEGER,
            "scale_factor": INTEGER,
            "priority_weight": NUMBER,
            "slo": NUMBER,
            "arrival_time": NUMBER,
        },
        has_header=False,
        names=GAVEL_COLUMNS,
        separator="\t",
    )
    check_min(path, df, "scale_factor", 1)
    check_non_decreasing(path, df, "arrival_time", header_lines=0)
    return df.drop(ROW)


def gavel(path: Path) -> Trace:
    """Gavel ``.trace`` files: a file, or a folder of them (tenant = file name)."""
    files = sorted(path.glob("*.trace")) if path.is_dir() else [path]
    if not files:
        raise TraceFormatError(str(path), None, None, "no .trace files in this folder")
    jobs = pl.concat([_gavel_file(f).with_columns(tenant=pl.lit(f.stem)) for f in files])
    jobs = jobs.select(
        submit_time_s="arrival_time",
        num_gpus="scale_factor",
        job_type="job_type",
        total_steps="total_steps",
        priority_weight="priority_weight",
        tenant="tenant",
    )
    return Trace(
        name=path.stem,
        format="gavel",
        paths=tuple(files),
        clock=Clock.RELATIVE,
        jobs=with_gpu_time(jobs),
        notes=("Gavel traces give steps, not durations: no duration or GPU-time statistics.",),
    )


# --- Sia workloads ---------------------------------------------------------------------------


def _sia_file(path: Path, tenant: str) -> pl.DataFrame:
    df = read_table(path, {"time": NUMBER, "application": TEXT, "num_replicas": INTEGER})
    check_non_decreasing(path, df, "time")
    return df.select(
        submit_time_s="time", num_gpus="num_replicas", job_type="application", tenant=pl.lit(tenant)
    )


def sia(path: Path) -> Trace:
    """Sia workloads: one file, a set folder (tenant = file) or the root (tenant = set)."""
    if path.is_file():
        parts = [_sia_file(path, path.stem)]
        files = [path]
    elif any(path.glob("workload-*.csv")):
        files = sorted(path.glob("workload-*.csv"))
        parts = [_sia_file(f, f.stem) for f in files]
    else:
        files = sorted(path.glob("*/workload-*.csv"))
        parts = [_sia_file(f, f.parent.name) for f in files]
    if not files:
        raise TraceFormatError(str(path), None, None, "no workload-N.csv files found")
    return Trace(
        name="sia" if path.is_dir() and not path.name.startswith("workload") else path.stem,
        format="sia",
        paths=tuple(files),
        clock=Clock.RELATIVE,
        jobs=with_gpu_time(pl.concat(parts)),
        notes=(
            "Semi-synthetic: submit times are real; application, GPU count and batch size were "
            "drawn from profiles, not the job's real values. Each workload file has its own "
            "time origin.",
        ),
    )
