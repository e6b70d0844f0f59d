"""The shared middle of every trace reader: raw rows in, a validated :class:`Workload` out.

A reader's only job is to turn the lines of one file format into :class:`JobRow` records (one
per job, with the line it came from). Everything every format needs happens here, once:

1. **Errors.** A malformed field raises :class:`RowError` inside the reader;
   :meth:`ReadContext.fail` turns it into :class:`~tessera.errors.TraceFormatError` naming the
   file, line and field -- or, with ``on_error="skip"``, records a :class:`SkippedRow` and moves
   on. Nothing is dropped silently: rows removed by a documented *rule* (CPU-only tasks, pods
   that never started) are counted with :meth:`ReadContext.filter` and reported in
   ``Workload.notes``.
2. **Job types.** Most traces do not say which model a job trains, but ``perf`` needs one.
   Rule: a job without a type gets one of the profiled types valid for its gang size --
   every type for 1 GPU, the *distributable* types (profiled at more than one GPU) for larger
   gangs -- chosen by a stable hash (BLAKE2b, 64 bits) of its job id, modulo the number of
   candidates in sorted order. The same id always gets the same type, on every machine and in
   every Python process (Python's own ``hash`` is salted; this is not).
3. **Work.** A trace that gives a *duration* becomes a step budget the way Gavel does it:
   ``total_steps = duration_s × throughput(job_type, reference flavor, num_gpus)``, the
   reference flavor being the throughput table's (V100-16GB for Gavel's profiles). Gang sizes
   that were never profiled (3, 16, 64 GPUs) use ``perf``'s linear extrapolation. The trace
   duration is kept as ``JobSpec.duration_hint_s``.
4. **Order.** Duplicate ids are errors (naming both lines). Rows are sorted by submit time
   (stably) unless the format forbids disorder (Gavel TSV), and the sort is noted.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Literal

from tessera.errors import SpecError, TraceFormatError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import ElasticRange, JobId, JobSpec, Workload
from tessera.model.quantity import parse_cpus, parse_memory_gib
from tessera.model.resources import HostDemand
from tessera.perf.profiles import ThroughputTable

OnError = Literal["raise", "skip"]


class RowError(Exception):
    """Raised by a reader for one bad field; :meth:`ReadContext.fail` decides what happens."""

    def __init__(self, field_name: str | None, message: str) -> None:
        super().__init__(message)
        self.field_name = field_name
        self.message = message


@dataclass(frozen=True, slots=True)
class SkippedRow:
    """A row left out in ``on_error="skip"`` mode, and why."""

    line: int | None
    field: str | None
    reason: str
    path: str = ""

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "file"
        if self.path:
            where = f"{Path(self.path).name} {where}"
        if self.field is not None:
            where += f" ({self.field})"
        return f"{where}: {self.reason}"


@dataclass(slots=True)
class JobRow:
    """One job as a reader saw it, before job types and step budgets are filled in.

    Exactly one of ``duration_s`` and ``total_steps`` is normally set.
    """

    line: int
    job_id: str
    submit_time_s: float
    num_gpus: int
    duration_s: float | None = None
    total_steps: float | None = None
    job_type: str | None = None
    queue: str = "default"
    priority_weight: float = 1.0
    slo_factor: float | None = None
    flavors: tuple[GpuFlavor, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    """Trace columns kept verbatim (``JobSpec.extra``: no decision reads them)."""
    model: str | None = None
    """The model's name in the profile catalogs (``JobSpec.model``)."""
    batch_size: int | None = None
    """The trace's global batch (``JobSpec.batch_size``)."""
    gpu_milli: int | None = None
    """A fractional 1-GPU task's share of its GPU, 1-999 (``JobSpec.gpu_milli``)."""
    elastic: ElasticRange | None = None
    """The job's GPU and batch range when it is elastic (``JobSpec.elastic``)."""
    source: str | None = None
    """The file the row came from, when a workload is read from several files."""
    host: HostDemand | None = None
    """CPUs and host memory the job asks for (``JobSpec.host``), from :func:`host_columns`."""


@dataclass
class ReadContext:
    """What one read needs besides the file: the error mode, perf data, and the report."""

    path: str
    on_error: OnError
    throughputs: ThroughputTable
    skipped: list[SkippedRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    filtered: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")

    def fail(self, line: int | None, field_name: str | None, message: str) -> None:
        """Report a bad row: raise in ``raise`` mode, record it in ``skip`` mode."""
        if self.on_error == "raise":
            raise TraceFormatError(self.path, line, field_name, message)
        self.skipped.append(SkippedRow(line, field_name, message, self.path))

    def filter(self, rule: str) -> None:
        """Count a row removed by a documented rule (reported in ``Workload.notes``)."""
        self.filtered[rule] += 1


# -- field parsing --------------------------------------------------------------------------


def parse_float(text: str, field_name: str, *, min_value: float | None = None) -> float:
    """A finite float, optionally ``>= min_value``; :class:`RowError` otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise RowError(field_name, f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise RowError(field_name, f"expected a finite number, got {text!r}")
    if min_value is not None and value < min_value:
        raise RowError(field_name, f"must be >= {min_value:g}, got {text!r}")
    return value


def parse_int(text: str, field_name: str, *, min_value: int | None = None) -> int:
    """An integer written as digits (``"8"``; ``"8.0"`` is accepted if whole)."""
    try:
        value = int(text)
    except ValueError:
        number = parse_float(text, field_name)
        if not number.is_integer():
            raise RowError(field_name, f"expected an integer, got {text!r}") from None
        value = int(number)
    if min_value is not None and value < min_value:
        raise RowError(field_name, f"must be >= {min_value}, got {text!r}")
    return value


# -- job types and step budgets --------------------------------------------------------------


#: Optional CSV columns for a job's CPUs and host memory (:func:`host_columns`).
HOST_COLUMNS: tuple[str, ...] = ("cpus", "memory", "host_per")


def host_columns(cols: dict[str, int], f: list[str]) -> HostDemand | None:
    """A row's CPU and host-memory demand from the optional columns ``cpus`` (cores, ``1.5``
    or ``1500m``), ``memory`` (``16Gi``, ``512Mi``, or GiB) and ``host_per`` (``gpu``, the
    default, or ``job``). ``None`` when the file has neither column or the row leaves both
    empty: the job then gets the GPU-proportional share of its server.

    Raises:
        RowError: a malformed, negative or NaN amount, or a ``host_per`` other than gpu/job.
    """
    cpus_text = f[cols["cpus"]].strip() if "cpus" in cols else ""
    mem_text = f[cols["memory"]].strip() if "memory" in cols else ""
    if not cpus_text and not mem_text:
        return None
    per = f[cols["host_per"]].strip().lower() if "host_per" in cols else ""
    if per not in ("", "gpu", "job"):
        raise RowError("host_per", f"must be gpu or job, got {per!r}")
    try:
        cpus = parse_cpus(cpus_text, "cpus") if cpus_text else 0.0
    except SpecError as e:
        raise RowError("cpus", str(e)) from None
    try:
        mem = parse_memory_gib(mem_text, "memory") if mem_text else 0.0
    except SpecError as e:
        raise RowError("memory", str(e)) from None
    return HostDemand(cpus, mem, per != "job")


def stable_index(key: str, n: int) -> int:
    """A deterministic index in ``range(n)`` from a string (BLAKE2b, not Python's salted hash)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n


def candidate_types(table: ThroughputTable, num_gpus: int) -> tuple[str, ...]:
    """Profiled job types a gang of ``num_gpus`` may be assigned (sorted)."""
    return table.job_types() if num_gpus == 1 else table.distributable_types()


class StepConverter:
    """Throughput on the reference flavor per (job type, gang size), looked up once each."""

    def __init__(self, table: ThroughputTable) -> None:
        self.table = table
        self._cache: dict[tuple[str, int], float] = {}

    def steps_per_s(self, job_type: str, num_gpus: int) -> float:
        """Steps/s of ``job_type`` on ``num_gpus`` reference GPUs (extrapolated if unprofiled)."""
        key = (job_type, num_gpus)
        tput = self._cache.get(key)
        if tput is None:
            tput = self.table.throughput(job_type, self.table.reference_flavor, num_gpus)
            self._cache[key] = tput
        return tput


# -- assembling the workload -----------------------------------------------------------------


def build_workload(
    rows: list[JobRow],
    ctx: ReadContext,
    name: str,
    *,
    sort_by_submit: bool = True,
) -> Workload:
    """Check ids, order, fill in types and steps, and wrap everything in a :class:`Workload`."""
    rows = _drop_duplicates(rows, ctx)
    if sort_by_submit and any(a.submit_time_s > b.submit_time_s for a, b in pairwise(rows)):
        rows = sorted(rows, key=lambda r: r.submit_time_s)  # stable: ties keep file order
        ctx.notes.append("rows were not in submit-time order; sorted by submit time (stable)")
    table = ctx.throughputs
    conv = StepConverter(table)
    sizes_known = {t: set(table.scale_factors(t)) for t in table.job_types()}
    jobs: list[JobSpec] = []
    typed_by_rule = 0
    candidates = {1: candidate_types(table, 1), 2: candidate_types(table, 2)}
    extrapolated: Counter[int] = Counter()
    for r in rows:
        job_type = r.job_type
        if job_type is None:
            pool = candidates[1 if r.num_gpus == 1 else 2]
            job_type = pool[stable_index(r.job_id, len(pool))]
            typed_by_rule += 1
        if r.num_gpus not in sizes_known.get(job_type, ()):
            extrapolated[r.num_gpus] += 1
        tput = conv.steps_per_s(job_type, r.num_gpus)
        steps = r.total_steps
        duration = r.duration_s
        if steps is None:
            steps = (duration or 0.0) * tput
        elif duration is None and tput > 0:
            duration = steps / tput
        jobs.append(
            JobSpec(
                job_id=JobId(r.job_id),
                job_type=job_type,
                num_gpus=r.num_gpus,
                total_steps=steps,
                submit_time_s=r.submit_time_s,
                flavors=r.flavors,
                priority_weight=r.priority_weight,
                queue=r.queue,
                slo_factor=r.slo_factor,
                duration_hint_s=duration,
                elastic=r.elastic,
                model=r.model,
                batch_size=r.batch_size,
                gpu_milli=r.gpu_milli,
                extra=r.extra,
                host=r.host,
            )
        )
    if typed_by_rule:
        ctx.notes.append(
            f"{typed_by_rule} jobs had no job type; assigned by stable hash of the job id "
            "among profiled types valid for their gang size"
        )
    if extrapolated:
        sizes = ", ".join(f"{n} GPUs: {c}" for n, c in sorted(extrapolated.items()))
        ctx.notes.append(f"throughput extrapolated for unprofiled gang sizes ({sizes})")
    for rule, count in ctx.filtered.items():
        ctx.notes.append(f"filtered {count} rows: {rule}")
    if ctx.skipped:
        first = "; ".join(str(s) for s in ctx.skipped[:3])
        ctx.notes.append(f"skipped {len(ctx.skipped)} malformed rows (first: {first})")
    if not jobs:
        detail = f" after skipping {len(ctx.skipped)} rows" if ctx.skipped else ""
        detail += f" and filtering {sum(ctx.filtered.values())}" if ctx.filtered else ""
        raise TraceFormatError(ctx.path, None, None, f"empty trace: no jobs{detail}")
    return Workload(
        name=name,
        jobs=tuple(jobs),
        source=ctx.path,
        skipped_rows=len(ctx.skipped),
        notes=tuple(ctx.notes),
    )


def _drop_duplicates(rows: list[JobRow], ctx: ReadContext) -> list[JobRow]:
    first_seen: dict[str, JobRow] = {}
    kept: list[JobRow] = []
    for r in rows:
        seen = first_seen.get(r.job_id)
        if seen is not None:
            where = f"line {seen.line}"
            if seen.source is not None:
                where = f"{Path(seen.source).name} {where}"
            saved, ctx.path = ctx.path, r.source or ctx.path
            try:
                ctx.fail(r.line, "job_id", f"duplicate job id {r.job_id!r} (first on {where})")
            finally:
                ctx.path = saved
            continue
        first_seen[r.job_id] = r
        kept.append(r)
    return kept
