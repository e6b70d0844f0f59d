"""The Philly job table (Microsoft, ATC'19), as derived by the Pollux artifact.

Columns: ``timestamp`` (submit time, ``YYYY-MM-DD HH:MM:SS``, local wall clock, no zone),
``duration`` (s), ``num_gpus``, ``gpu_time`` (GPU-s, = duration × num_gpus) and ``cluster`` (the
virtual cluster, a hash). An optional ``job_id`` column is used when present (the bundled slice
carries the ids of the full table). Optional ``cpus``, ``memory`` and ``host_per`` columns give
a job's CPUs and host memory (:func:`tessera.workload.rows.host_columns`).

Conversions:

* **ids** -- the table has none; a job is ``philly-<n>`` with ``n`` its 0-based data-row index
  in the file (6 digits), stable across reads and unaffected by skipped rows.
* **submit times** -- seconds from the *earliest* submission in the file. Timestamps are
  treated as naive wall-clock times (no daylight-saving correction; the trace has no zone).
  Rows are not sorted upstream; the reader sorts them (stably) and says so in the notes.
* **tenant** -- ``cluster`` (the VC) becomes ``JobSpec.queue``.
* **work** -- ``duration`` on the reference flavor (V100) × profiled throughput; job types by
  the stable-hash rule of :mod:`tessera.workload.rows`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from tessera.model.jobs import Workload
from tessera.workload.csvio import iter_csv
from tessera.workload.registry import TraceReader, register_reader
from tessera.workload.rows import (
    JobRow,
    ReadContext,
    RowError,
    build_workload,
    host_columns,
    parse_float,
    parse_int,
)

REQUIRED: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "cluster")
_EPOCH = datetime(1970, 1, 1)


def read_philly(path: Path, ctx: ReadContext, name: str) -> Workload:
    """Read a Philly job table (see the module docstring for the conversions)."""
    rows: list[JobRow] = []
    stamps: list[float] = []
    for line, index, cols, f in iter_csv(path, ctx, REQUIRED):
        try:
            text = f[cols["timestamp"]].strip()
            try:
                stamp = (datetime.fromisoformat(text) - _EPOCH).total_seconds()
            except ValueError:
                raise RowError(
                    "timestamp", f"expected 'YYYY-MM-DD HH:MM:SS', got {text!r}"
                ) from None
            duration = parse_float(f[cols["duration"]], "duration")
            if duration <= 0:
                raise RowError("duration", f"must be > 0 s, got {f[cols['duration']]!r}")
            num_gpus = parse_int(f[cols["num_gpus"]], "num_gpus", min_value=1)
            if "gpu_time" in cols:
                parse_float(f[cols["gpu_time"]], "gpu_time", min_value=0.0)
            queue = f[cols["cluster"]].strip()
            if not queue:
                raise RowError("cluster", "empty virtual-cluster name")
            job_id = f[cols["job_id"]].strip() if "job_id" in cols else f"philly-{index:06d}"
            if not job_id:
                raise RowError("job_id", "empty job id")
            host = host_columns(cols, f)
        except RowError as err:
            ctx.fail(line, err.field_name, err.message)
            continue
        rows.append(JobRow(line, job_id, 0.0, num_gpus, duration_s=duration, queue=queue,
                           host=host))
        stamps.append(stamp)
    if stamps:
        origin = min(stamps)
        for row, stamp in zip(rows, stamps, strict=True):
            row.submit_time_s = stamp - origin
        start = _EPOCH + timedelta(seconds=origin)
        ctx.notes.append(f"time 0 = first submission, {start:%Y-%m-%d %H:%M:%S} (local time)")
    return build_workload(rows, ctx, name)


def _sniff(path: Path, header: list[str] | None) -> bool:
    return header is not None and {"timestamp", "duration", "num_gpus", "cluster"} <= set(header)


register_reader(
    TraceReader("philly", read_philly, _sniff),
    "Philly job table (Pollux-derived CSV: timestamp, duration, num_gpus, gpu_time, cluster).",
)
