"""``load_trace``: one entry point for every trace, by name or by path.

>>> wl = load_trace("philly", limit=100)       # the bundled Philly slice   # doctest: +SKIP
>>> len(wl), wl.jobs[0].queue                                              # doctest: +SKIP
(100, '6214e9')

How a path's format is found (unless ``format=`` says it):

1. a trace name (``philly``, ``itp``, ``fgd``, ``sia-philly-1`` ...; the registry in
   :mod:`tessera.workload.known`, shared with ``tessera analyze``) resolves to its file and
   reader first; names that hold no job list (``helios``, ``pai-2020`` ...) are refused;
2. a directory is read as one workload only by a multi-file format (ITP's ``clusterNN.csv``);
3. otherwise every registered reader's ``sniff`` looks at the file name, CSV header or shape
   (Gavel: ``.trace`` suffix or 10 tab-separated fields); exactly one must claim it.

Errors name the file, line and field (:class:`~tessera.errors.TraceFormatError`). With
``on_error="skip"`` bad rows are left out, counted in ``Workload.skipped_rows`` and listed by
:func:`read_trace` (``TraceLoad.skipped``) so the CLI can show every one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from tessera.errors import SpecError, TraceFormatError
from tessera.model.jobs import JobSpec, Workload
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.workload.csvio import read_header
from tessera.workload.known import (
    TRACES,
    job_trace_labels,
    resolve_named,
    unknown_trace_message,
)

# the reader modules register themselves in READERS when imported (the registry is below them)
from tessera.workload.readers import fgd, gavel_tsv, itp, philly, sia  # noqa: F401
from tessera.workload.registry import READERS, TraceReader
from tessera.workload.rows import OnError, ReadContext, SkippedRow


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """A loaded workload plus the full list of rows skipped on the way."""

    workload: Workload
    format: str
    skipped: tuple[SkippedRow, ...]


def detect_format(path: Path) -> TraceReader:
    """The reader whose ``sniff`` claims ``path``.

    Raises:
        TraceFormatError: no reader, or more than one, recognises the file.
    """
    probe = path
    if path.is_dir():
        files = sorted(path.glob("*.csv"))
        if not files:
            raise TraceFormatError(str(path), None, None, "directory holds no .csv traces")
        probe = files[0]
    header = read_header(probe)
    claims = [r for r in (e.obj for e in READERS) if r.sniff(probe, header)]
    if path.is_dir():
        claims = [r for r in claims if r.multi_file]
    if len(claims) == 1:
        return claims[0]
    if not claims:
        what = f"header {', '.join(header)}" if header else "its first line"
        if probe.stat().st_size == 0:
            raise TraceFormatError(str(path), None, None, "empty trace: the file is empty")
        raise TraceFormatError(
            str(path), 1, None,
            f"cannot tell the trace format from {what}; pass format= one of "
            f"{', '.join(READERS.names())}",
        )
    names = ", ".join(r.name for r in claims)
    raise TraceFormatError(str(path), 1, None, f"ambiguous format ({names}); pass format=")


def read_trace(
    path_or_name: str | Path,
    *,
    format: str | None = None,
    on_error: OnError = "raise",
    limit: int | None = None,
    time_window: tuple[float, float] | None = None,
    throughputs: ThroughputTable | None = None,
) -> TraceLoad:
    """Like :func:`load_trace`, but also return the format used and every skipped row."""
    target = str(path_or_name)
    entry = TRACES.get(target)
    if entry is not None and entry.reader is None:
        raise SpecError(
            f"trace {target!r} holds no job list to simulate (`tessera analyze {target}` reads "
            f"it); job traces: {', '.join(job_trace_labels())}"
        )
    named = resolve_named(target)
    if named is not None and named[0].reader is not None:
        path = named[1]
        name = target
        default_reader: TraceReader | None = READERS.get(named[0].reader)
    else:
        path = Path(target)
        name = path.stem
        if not path.exists():
            raise SpecError(unknown_trace_message(target))
        default_reader = None
    reader = READERS.get(format) if format is not None else default_reader or detect_format(path)
    if path.is_dir() and not reader.multi_file:
        raise SpecError(f"{path} is a directory; format {reader.name!r} reads one file at a time")
    ctx = ReadContext(str(path), on_error, throughputs or default_throughputs())
    workload = reader.read(path, ctx, name)
    workload = _apply_window(workload, time_window, limit)
    return TraceLoad(workload, reader.name, tuple(ctx.skipped))


def load_trace(
    path_or_name: str | Path,
    *,
    format: str | None = None,
    on_error: OnError = "raise",
    limit: int | None = None,
    time_window: tuple[float, float] | None = None,
    throughputs: ThroughputTable | None = None,
) -> Workload:
    """Read a trace into a validated :class:`Workload`.

    Args:
        path_or_name: a file, an ITP directory, or a trace name (``philly``, ``philly-full``,
            ``itp``, ``itp-cluster04``, ``fgd``, ``fgd-gpuspec33``, ``sia-philly-1`` ...; a
            name wins over a path of the same spelling: write ``./philly`` for the path).
        format: a registered format name (``gavel``, ``philly``, ``itp``, ``fgd``, ``sia``);
            detected from the file when ``None``.
        on_error: ``"raise"`` (default) stops at the first malformed row with a
            :class:`~tessera.errors.TraceFormatError`; ``"skip"`` leaves such rows out and
            counts them (``Workload.skipped_rows``; details in ``Workload.notes`` and
            :func:`read_trace`).
        limit: keep only the first ``limit`` jobs in submission order (after the window).
        time_window: ``(start_s, end_s)``: keep jobs submitted in ``[start_s, end_s)`` of the
            trace's time axis, then shift times so ``start_s`` becomes 0.
        throughputs: profiles for job-type validation and duration→steps; default Gavel's.

    Raises:
        TraceFormatError: malformed input (file, line, field).
        SpecError: unknown name or format, missing public data (the message names the file
            and every folder searched), a name with no job list, or an empty window.
    """
    return read_trace(
        path_or_name,
        format=format,
        on_error=on_error,
        limit=limit,
        time_window=time_window,
        throughputs=throughputs,
    ).workload


def _apply_window(
    workload: Workload, window: tuple[float, float] | None, limit: int | None
) -> Workload:
    if window is None and limit is None:
        return workload
    jobs: list[JobSpec] | tuple[JobSpec, ...] = workload.jobs
    notes: list[str] = []  # what the window and limit kept: before the reader's notes
    if window is not None:
        start_s, end_s = window
        if not end_s > start_s >= 0:
            raise SpecError(f"time_window must satisfy 0 <= start < end, got {window}")
        jobs = [
            dataclasses.replace(j, submit_time_s=j.submit_time_s - start_s)
            for j in jobs
            if start_s <= j.submit_time_s < end_s
        ]
        notes.append(
            f"time window [{start_s:g}, {end_s:g}) s kept {len(jobs)} of {len(workload)} jobs; "
            f"times shifted by -{start_s:g} s"
        )
    if limit is not None:
        if limit < 1:
            raise SpecError(f"limit must be >= 1, got {limit}")
        if limit < len(jobs):
            notes.append(f"limit kept the first {limit} of {len(jobs)} jobs")
        jobs = jobs[:limit]
    if not jobs:
        raise SpecError(f"workload {workload.name!r}: no jobs in time window {window}")
    if notes and workload.notes:
        # The reader's notes (job types assigned, sizes extrapolated, rows skipped) count
        # every job it read: say so, rather than let them pass for counts of the kept jobs.
        notes[-1] += f"; the notes below count all {len(workload)} jobs read"
    return dataclasses.replace(workload, jobs=tuple(jobs), notes=(*notes, *workload.notes))
