"""Gavel's trace format: 10 tab-separated columns, one job per line, no header.

This is the format Gavel's ``scheduler/utils.py:parse_trace`` reads, so the *same file* runs in
both systems. Columns, in order::

    job_type  command  working_directory  num_steps_arg  needs_data_dir
    total_steps  scale_factor  priority_weight  SLO  arrival_time

* ``job_type`` must be a profiled type (``ResNet-50 (batch size 64)``); Gavel looks its
  throughput up by ``(job_type, scale_factor)``.
* ``total_steps`` and ``scale_factor`` are integers (Gavel calls ``int()`` on them);
  ``needs_data_dir`` is 0 or 1; ``priority_weight`` and ``SLO`` are floats, ``SLO`` -1 (any
  negative value) meaning none; ``arrival_time`` is seconds from trace start (a float).
* Arrivals must be non-decreasing: Gavel replays lines in file order, so an out-of-order line is
  an error here rather than something to sort silently.
* Job ids are the 0-based line order as strings (``"0"``, ``"1"`` ...), as Gavel numbers them.
* Gavel cannot read blank lines; a blank line followed by more jobs is an error, trailing blank
  lines are ignored.

The four "how to launch it" columns matter only on a physical cluster; they are kept in
``JobSpec.extra`` so :func:`write_gavel_tsv` reproduces the file field for field. Gang sizes Gavel
never profiled (e.g. 16) are accepted and noted -- Gavel itself would reject such a file.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tessera.errors import SpecError, TraceFormatError
from tessera.model.jobs import Workload
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.workload.registry import TraceReader, register_reader
from tessera.workload.rows import (
    JobRow,
    ReadContext,
    RowError,
    build_workload,
    parse_float,
    parse_int,
)

COLUMNS: tuple[str, ...] = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)
LAUNCH_FIELDS: tuple[str, ...] = COLUMNS[1:5]
"""Columns kept verbatim in ``JobSpec.extra`` (physical-cluster launch details)."""


def _parse_line(
    fields: list[str], line: int, index: int, known_types: frozenset[str]
) -> JobRow:
    if len(fields) != len(COLUMNS):
        name = COLUMNS[len(fields)] if len(fields) < len(COLUMNS) else None
        raise RowError(name, f"{len(fields)} tab-separated fields, expected {len(COLUMNS)}")
    job_type = fields[0]
    if job_type not in known_types:
        close = difflib.get_close_matches(job_type, sorted(known_types), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise RowError("job_type", f"unknown job type {job_type!r}{hint}")
    if fields[4] not in ("0", "1"):
        raise RowError("needs_data_dir", f"expected 0 or 1, got {fields[4]!r}")
    try:
        total_steps = int(fields[5])
    except ValueError:
        raise RowError("total_steps", f"expected an integer, got {fields[5]!r}") from None
    if total_steps < 1:
        raise RowError("total_steps", f"must be >= 1, got {fields[5]!r}")
    scale_factor = parse_int(fields[6], "scale_factor", min_value=1)
    if fields[6].strip() != str(scale_factor):
        raise RowError("scale_factor", f"expected an integer, got {fields[6]!r}")
    priority = parse_float(fields[7], "priority_weight")
    if priority <= 0:
        raise RowError("priority_weight", f"must be > 0, got {fields[7]!r}")
    slo = parse_float(fields[8], "SLO")
    if slo == 0:
        raise RowError("SLO", "0 is not a valid SLO factor (use -1 for none)")
    arrival = parse_float(fields[9], "arrival_time", min_value=0.0)
    extra = dict(zip(LAUNCH_FIELDS, fields[1:5], strict=True))
    return JobRow(
        line=line,
        job_id=str(index),
        submit_time_s=arrival,
        num_gpus=scale_factor,
        total_steps=float(total_steps),
        job_type=job_type,
        priority_weight=priority,
        slo_factor=slo if slo > 0 else None,
        extra=extra,
    )


def read_gavel_tsv(path: Path, ctx: ReadContext, name: str) -> Workload:
    """Read a Gavel 10-column trace (see the module docstring for the rules)."""
    table = ctx.throughputs
    known = frozenset(table.job_types())
    rows: list[JobRow] = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        ctx.fail(None, None, f"not UTF-8 text ({exc.reason})")
        text = ""
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    profiled = {t: frozenset(table.scale_factors(t)) for t in known}
    last_arrival = 0.0
    index = 0
    unprofiled = 0
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            ctx.fail(line_no, None, "blank line between jobs (Gavel cannot read it)")
            continue
        try:
            row = _parse_line(raw.split("\t"), line_no, index, known)
            if row.submit_time_s < last_arrival:
                raise RowError(
                    "arrival_time",
                    f"arrival {row.submit_time_s:g} s is before the previous job's "
                    f"{last_arrival:g} s; Gavel traces must be in arrival order",
                )
        except RowError as err:
            ctx.fail(line_no, err.field_name, err.message)
        else:
            last_arrival = row.submit_time_s
            if row.num_gpus not in profiled[row.job_type or ""]:
                unprofiled += 1
            rows.append(row)
        index += 1
    if not lines:
        raise TraceFormatError(str(path), None, None, "empty trace: no job lines")
    if unprofiled:
        ctx.notes.append(
            f"{unprofiled} jobs use a (job_type, scale_factor) pair Gavel never profiled; "
            "Tessera extrapolates, Gavel would reject the file"
        )
    return build_workload(rows, ctx, name, sort_by_submit=False)


def _sniff(path: Path, header: list[str] | None) -> bool:
    if path.suffix == ".trace":
        return True
    try:
        with path.open(encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return first.count("\t") == len(COLUMNS) - 1


register_reader(
    TraceReader("gavel", read_gavel_tsv, _sniff),
    "Gavel's 10-column tab-separated trace (job_type ... arrival_time), read as Gavel does.",
)


# -- writing ------------------------------------------------------------------------------------

_DEFAULT_LAUNCH = {
    "command": "tessera-job",
    "working_directory": ".",
    "num_steps_arg": "--steps",
    "needs_data_dir": "0",
}


def _format_number(value: float) -> str:
    """Integers without a decimal point; other floats in their shortest exact form."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def write_gavel_tsv(
    workload: Workload,
    path: str | Path,
    *,
    strict: bool = True,
    throughputs: ThroughputTable | None = None,
) -> Path:
    """Write ``workload`` as a Gavel 10-column trace that Gavel's ``parse_trace`` can read.

    ``total_steps`` is rounded to an integer (at least 1), as Gavel requires. Launch columns come
    from ``JobSpec.extra`` when the job was read from a Gavel trace, else neutral placeholders
    (Gavel's simulator never runs them). Arrival times are written exactly (integers without a
    decimal point).

    Args:
        workload: jobs to write, already in arrival order.
        path: output file.
        strict: refuse jobs Gavel cannot simulate -- a (job_type, scale_factor) pair with no
            profile in ``throughputs``; pass ``False`` to write them anyway.
        throughputs: the profiles Gavel will use; default the bundled Gavel table.

    Raises:
        SpecError: in strict mode, naming the first job Gavel could not run, or when a field
            contains a tab or newline.
    """
    table = throughputs or default_throughputs()
    out = Path(path)
    lines: list[str] = []
    profiled = {t: frozenset(table.scale_factors(t)) for t in table.job_types()}
    for job in workload.jobs:
        if strict and job.num_gpus not in profiled.get(job.job_type, ()):
            raise SpecError(
                f"job {job.job_id}: Gavel has no profile for ({job.job_type!r}, {job.num_gpus}); "
                "pass strict=False to write it anyway"
            )
        launch = [job.extra.get(k, _DEFAULT_LAUNCH[k]) for k in LAUNCH_FIELDS]
        slo = -1.0 if job.slo_factor is None else job.slo_factor
        fields = [
            job.job_type,
            *launch,
            str(max(1, round(job.total_steps))),
            str(job.num_gpus),
            _format_number(job.priority_weight),
            f"{slo:f}",
            _format_number(job.submit_time_s),
        ]
        if any("\t" in f or "\n" in f for f in fields):
            raise SpecError(f"job {job.job_id}: a field contains a tab or newline")
        lines.append("\t".join(fields))
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out
