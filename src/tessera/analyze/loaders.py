"""Columnar loaders: one function per trace format, each returning a :class:`Trace`.

Each loader reads with :func:`tessera.analyze.tables.read_table` (typed, line-accurate errors),
renames to the canonical columns of :mod:`tessera.analyze.trace`, and applies the checks the
format documents: ITP, Sia, Gavel and the Philly node sequence are sorted by time, so a
decrease is reported as "timestamps out of order". The Pollux Philly table is documented as
unsorted, so it is not checked; FGD's resampled pod lists are not in creation order upstream,
so FGD rows are sorted (stably, with a note), as the simulator's reader does. Nothing here
loops over rows.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tessera.analyze.tables import (
    INTEGER,
    NUMBER,
    OPTIONAL_NUMBER,
    OPTIONAL_TEXT,
    ROW,
    TEXT,
    Column,
    check_min,
    check_non_decreasing,
    check_not_before,
    parse_datetime,
    read_table,
)
from tessera.analyze.trace import Clock, Trace
from tessera.errors import TraceFormatError

PHILLY_JOBS = "philly_jobs_pollux.csv"
PHILLY_NODES = "philly_node_sequence.csv"


def with_gpu_time(jobs: pl.DataFrame) -> pl.DataFrame:
    """Add ``gpu_request`` (= num_gpus unless set) and ``gpu_time_s`` where a duration exists."""
    if "gpu_request" not in jobs.columns and "num_gpus" in jobs.columns:
        jobs = jobs.with_columns(gpu_request=pl.col("num_gpus").cast(pl.Float64))
    if "duration_s" in jobs.columns and "gpu_request" in jobs.columns:
        jobs = jobs.with_columns(gpu_time_s=pl.col("duration_s") * pl.col("gpu_request"))
    return jobs


def _relative_submit(jobs: pl.DataFrame, column: str) -> pl.DataFrame:
    """``submit_time_s`` measured from the trace's first submission."""
    return jobs.with_columns(
        submit_time_s=(pl.col(column) - pl.col(column).min()).cast(pl.Float64)
    )


# --- Microsoft Philly ------------------------------------------------------------------------


def philly_jobs(path: Path) -> pl.DataFrame:
    """The Pollux-derived Philly job table: wall-clock submits, VC as tenant."""
    df = read_table(
        path,
        {"timestamp": TEXT, "duration": NUMBER, "num_gpus": INTEGER, "cluster": TEXT},
    )
    check_min(path, df, "duration", 0)
    check_min(path, df, "num_gpus", 0)
    submit_at = parse_datetime(path, df, "timestamp")
    jobs = df.select(
        submit_at=submit_at,
        duration_s=pl.col("duration"),
        num_gpus=pl.col("num_gpus"),
        tenant=pl.col("cluster"),
    )
    jobs = jobs.with_columns(
        submit_time_s=(pl.col("submit_at") - pl.col("submit_at").min()).dt.total_microseconds()
        / 1e6
    )
    return with_gpu_time(jobs)


def philly_occupancy(path: Path) -> pl.DataFrame:
    """Per-minute active and total Philly nodes (Helios artifact)."""
    df = read_table(path, {"time": TEXT, "active": INTEGER, "total": INTEGER})
    time = parse_datetime(path, df, "time")
    df = df.with_columns(time=time)
    check_non_decreasing(path, df, "time")
    return df.select("time", active_nodes="active", total_nodes="total")


def philly(path: Path) -> Trace:
    """Philly: a folder (job table + node sequence if present) or the job table itself."""
    jobs_path = path / PHILLY_JOBS if path.is_dir() else path
    nodes_path = jobs_path.parent / PHILLY_NODES
    occupancy = philly_occupancy(nodes_path) if nodes_path.is_file() else None
    return Trace(
        name="philly-full",
        format="philly",
        paths=(jobs_path, nodes_path) if occupancy is not None else (jobs_path,),
        clock=Clock.WALL,
        jobs=philly_jobs(jobs_path),
        occupancy=occupancy,
        notes=(
            "Pollux-derived table: no status, user or queueing delay; filtering undocumented "
            "(82,247 jobs vs 112,956 GPU jobs Acme counts in the raw trace).",
        ),
    )


def philly_slice(path: Path) -> Trace:
    """A slice of the Philly table with Tessera's ``job_id`` column, such as the bundled week.

    ``tessera.workload.bundle`` writes such slices (rows kept verbatim, ``job_id`` prepended).
    The published figures describe the whole table, so none are compared here.
    """
    return Trace(
        name="philly",
        format="philly-slice",
        paths=(path,),
        clock=Clock.WALL,
        jobs=philly_jobs(path),
        notes=(
            "A slice of the Pollux Philly table (the bundled one: the week 2017-11-27 .. "
            "2017-12-04, jobs of at least 60 s and under 1,000 GPU-hours; see "
            "data/workloads/NOTICE.txt). Published figures describe the whole table: run "
            "`tessera analyze philly-full` with the public data.",
        ),
    )


def philly_nodes(path: Path) -> Trace:
    """The Philly node sequence alone (cluster occupancy)."""
    return Trace(
        name="philly-nodes",
        format="philly-nodes",
        paths=(path,),
        clock=Clock.WALL,
        occupancy=philly_occupancy(path),
    )


def philly_runtime(path: Path) -> Trace:
    """Alibaba's Philly runtime file (NSDI'22 Fig. 4): durations only."""
    df = read_table(path, {"runtime": NUMBER})
    check_min(path, df, "runtime", 0)
    return Trace(
        name="philly-runtime",
        format="philly-runtime",
        paths=(path,),
        jobs=df.select(duration_s="runtime"),
        notes=("Runtimes only: no sizes, submit times or tenants.",),
    )


def philly_gavel(path: Path) -> Trace:
    """Gavel's (duration, GPUs) Philly distribution; use as a distribution only."""
    df = read_table(path, {"duration_s": NUMBER, "num_gpus": INTEGER})
    check_min(path, df, "duration_s", 0)
    return Trace(
        name="philly-gavel",
        format="philly-gavel",
        paths=(path,),
        jobs=with_gpu_time(df.select("duration_s", "num_gpus")),
        notes=("Gavel's derived distribution (jobs >= ~1 h, <= 8 GPUs); no submit times.",),
    )


# --- Microsoft ITP (ElasticFlow) -------------------------------------------------------------


def _itp_file(path: Path) -> pl.DataFrame:
    df = read_table(
        path, {"submission_time": NUMBER, "duration": NUMBER, "num_gpu": INTEGER}
    )
    check_non_decreasing(path, df, "submission_time")
    check_min(path, df, "duration", 0)
    return df.select(
        submission_time="submission_time",
        duration_s="duration",
        num_gpus="num_gpu",
        tenant=pl.lit(path.stem),
    )


def itp(path: Path) -> Trace:
    """ITP: the dataset folder, its ``raw/`` folder, or one ``clusterNN.csv``; tenant = cluster."""
    if path.is_dir() and (path / "raw").is_dir():
        path = path / "raw"
    files = sorted(path.glob("cluster[0-9]*.csv")) if path.is_dir() else [path]
    if not files:
        raise TraceFormatError(str(path), None, None, "no clusterNN.csv files in this folder")
    jobs = pl.concat([_itp_file(f) for f in files])
    jobs = with_gpu_time(_relative_submit(jobs, "submission_time").drop("submission_time"))
    return Trace(
        name="itp",
        format="itp",
        paths=tuple(files),
        clock=Clock.RELATIVE,
        jobs=jobs,
        notes=(
            "No status, user, queueing delay or GPU type; jobs shorter than 600 s are absent "
            "upstream. Times are relative to an undisclosed origin (hour-of-day is relative).",
        ),
    )


# --- Alibaba FGD 2023 ------------------------------------------------------------------------

FGD_PODS = "openb_pod_list_default.csv"
FGD_NODES = "openb_node_list_all_node.csv"


def _header(path: Path) -> list[str]:
    with path.open(encoding="utf-8", errors="replace") as f:
        return f.readline().strip().split(",")


def fgd_pods(path: Path) -> pl.DataFrame:
    """FGD task list: fractional GPUs (``gpu_milli``), type constraints, QoS, phase, times."""
    header = _header(path)
    columns: dict[str, Column] = {"num_gpu": INTEGER, "gpu_milli": INTEGER}
    optional_text = {"gpu_spec", "qos", "pod_phase"} & set(header)
    columns |= {c: OPTIONAL_TEXT for c in sorted(optional_text)}
    timed = {"creation_time", "deletion_time", "scheduled_time"} <= set(header)
    if timed:
        columns |= {
            "creation_time": NUMBER,
            "deletion_time": OPTIONAL_NUMBER,
            "scheduled_time": OPTIONAL_NUMBER,
        }
    df = read_table(path, columns)
    check_min(path, df, "num_gpu", 0)
    check_min(path, df, "gpu_milli", 0)
    if timed:
        check_not_before(path, df, "scheduled_time", "creation_time")
        check_not_before(path, df, "deletion_time", "scheduled_time")
    fractional = (pl.col("num_gpus") == 1) & (pl.col("gpu_milli") < 1000)
    jobs = df.drop(ROW).rename({"num_gpu": "num_gpus"}).with_columns(
        gpu_request=pl.when(fractional)
        .then(pl.col("gpu_milli") / 1000)
        .otherwise(pl.col("num_gpus").cast(pl.Float64)),
    )
    renames = {"gpu_spec": "gpu_type", "pod_phase": "status"}
    jobs = jobs.rename({k: v for k, v in renames.items() if k in jobs.columns})
    if timed:
        jobs = jobs.with_columns(
            submit_time_s=pl.col("creation_time"),
            duration_s=pl.col("deletion_time") - pl.col("scheduled_time"),
            wait_s=pl.col("scheduled_time") - pl.col("creation_time"),
        ).drop("creation_time", "deletion_time", "scheduled_time")
    return with_gpu_time(jobs)


def fgd_nodes(path: Path) -> pl.DataFrame:
    """FGD node list: GPU model per node (empty model = CPU-only)."""
    df = read_table(
        path, {"sn": TEXT, "cpu_milli": NUMBER, "gpu": INTEGER, "model": OPTIONAL_TEXT}
    )
    return df.select(
        node="sn", gpu_type="model", num_gpus="gpu", cpu_cores=pl.col("cpu_milli") / 1000
    )


def fgd(path: Path) -> Trace:
    """FGD: the dataset folder (default pods + all nodes), a pod list or a node list."""
    if path.is_dir():
        pods_path, nodes_path = path / FGD_PODS, path / FGD_NODES
    elif path.name.startswith("openb_node_list"):
        pods_path, nodes_path = None, path
    else:
        pods_path, nodes_path = path, path.parent / FGD_NODES
    jobs = fgd_pods(pods_path) if pods_path is not None else None
    nodes = fgd_nodes(nodes_path) if nodes_path.is_file() else None
    timed = jobs is not None and "submit_time_s" in jobs.columns
    notes = [
        "pod_phase is the phase at trace end; duration = deletion - scheduled; "
        "G1/G2/G3 are undisclosed GPU models.",
    ]
    if jobs is not None and timed and not jobs["submit_time_s"].is_sorted():
        # The resampled variants (gpushare100 ...) are not in creation order upstream.
        back = int((jobs["submit_time_s"].diff() < 0).sum())
        jobs = jobs.sort("submit_time_s", maintain_order=True)
        notes.append(f"rows are not in creation order ({back} steps back); sorted by "
                     "creation_time, ties kept in file order")
    return Trace(
        name="fgd" if pods_path is None or pods_path.name == FGD_PODS else pods_path.stem,
        format="fgd",
        paths=tuple(p for p in (pods_path, nodes_path) if p is not None and p.is_file()),
        clock=Clock.RELATIVE if timed else Clock.NONE,
        jobs=jobs,
        nodes=nodes,
        notes=tuple(notes),
    )


# --- Inventories: Alibaba PAI 2020, Alibaba spot 2026 ----------------------------------------

PAI_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")


def pai_2020(path: Path) -> Trace:
    """PAI v2020 machine table (header-less); ``CPU`` machines have no GPUs."""
    if path.is_dir():
        path = path / "pai_machine_spec.csv"
    df = read_table(
        path,
        {"machine": TEXT, "gpu_type": TEXT, "cap_cpu": NUMBER, "cap_gpu": INTEGER},
        has_header=False,
        names=PAI_COLUMNS,
    )
    nodes = df.select(
        node="machine",
        gpu_type=pl.when(pl.col("gpu_type") == "CPU").then(None).otherwise(pl.col("gpu_type")),
        num_gpus="cap_gpu",
        cpu_cores="cap_cpu",
    )
    return Trace(
        name="pai-2020",
        format="pai-2020",
        paths=(path,),
        nodes=nodes,
        notes=(
            "Machine table only: the job/task/instance tables are not stored, so no job "
            "statistics. MISC = older GPUs (K40m, K80, M60).",
        ),
    )


def spot_2026(path: Path) -> Trace:
    """Alibaba spot-GPU 2026 node inventory."""
    if path.is_dir():
        path = path / "node_info_df.csv"
    df = read_table(
        path,
        {"gpu_model": TEXT, "gpu_capacity_num": INTEGER, "cpu_num": NUMBER, "node_name": TEXT},
    )
    nodes = df.select(
        node="node_name", gpu_type="gpu_model", num_gpus="gpu_capacity_num", cpu_cores="cpu_num"
    )
    return Trace(
        name="spot-2026",
        format="spot-2026",
        paths=(path,),
        nodes=nodes,
        notes=("Node inventory only; the job table (job_info_df.csv) is not stored.",),
    )
