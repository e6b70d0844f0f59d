"""Sia (SOSP'23) evaluation workloads: real submit times, synthetic models and sizes.

Columns: ``name`` (``<app>-<n>``), ``time`` (submit, s from workload start), ``application``
(bert | cifar10 | deepspeech2 | imagenet | yolov3), ``num_replicas`` (GPUs asked for at first),
``batch_size`` (initial global batch).

Sia's simulator trains each application to a fixed quality target with its own models, so the
file carries **no duration**. Tessera needs a job type it has profiles for and a step budget,
and derives both by documented rules (the result is an *approximation* of Sia's workload, noted
as such in ``Workload.notes``):

* **job type** -- the application itself when the throughput table profiles it (the Sia table,
  ``--throughputs sia``: ``imagenet (batch size 40)``), else the closest Gavel family
  (:data:`SIA_FAMILY`: cifar10 → ResNet-18, imagenet and yolov3 → ResNet-50, bert →
  Transformer, deepspeech2 → LM); either way at the profiled batch size nearest (in log
  scale) to the per-GPU batch ``batch_size / num_replicas``.
* **duration** -- Sia's generator assigned applications by the real job's GPU time: < 1 GPU-h →
  cifar10, < 10 → deepspeech2/bert, < 100 → yolov3, else imagenet, with every job between
  1 GPU-minute and 1000 GPU-hours. A job gets the geometric middle of its application's class
  (:data:`SIA_GPU_HOURS`), spread over its replicas: ``duration_s = gpu_h × 3600 / replicas``.
* ``application`` and ``batch_size`` are kept in ``JobSpec.extra``; queue is ``default``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

from tessera.model.jobs import Workload
from tessera.perf.profiles import ThroughputTable
from tessera.workload.csvio import iter_csv
from tessera.workload.registry import TraceReader, register_reader
from tessera.workload.rows import (
    JobRow,
    ReadContext,
    RowError,
    build_workload,
    parse_float,
    parse_int,
)

REQUIRED: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")

SIA_FAMILY: Mapping[str, str] = {
    "cifar10": "ResNet-18",
    "imagenet": "ResNet-50",
    "yolov3": "ResNet-50",
    "bert": "Transformer",
    "deepspeech2": "LM",
}
"""Sia application → the Gavel-profiled model family closest to it."""

SIA_GPU_HOURS: Mapping[str, float] = {
    "cifar10": math.sqrt(1 / 60 * 1),
    "deepspeech2": math.sqrt(1 * 10),
    "bert": math.sqrt(1 * 10),
    "yolov3": math.sqrt(10 * 100),
    "imagenet": math.sqrt(100 * 1000),
}
"""Representative GPU-hours per application: the geometric middle of its GPU-time class."""

_TYPE_RE = re.compile(r"^(?P<family>.+) \(batch size (?P<bs>\d+)\)$")


def _family_batches(table: ThroughputTable) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for job_type in table.distributable_types():
        m = _TYPE_RE.match(job_type)
        if m:
            out.setdefault(m.group("family"), []).append((int(m.group("bs")), job_type))
    return out


def sia_job_type(
    table: ThroughputTable,
    application: str,
    per_gpu_batch: float,
    families: dict[str, list[tuple[int, str]]] | None = None,
) -> str:
    """The profiled type for a Sia application at a per-GPU batch size (rule above).

    ``families`` is ``_family_batches(table)``, passed in to avoid recomputing it per row.
    """
    families = families if families is not None else _family_batches(table)
    choices = families.get(application) or families.get(SIA_FAMILY[application])
    if not choices:
        raise RowError("application", f"no profiled {SIA_FAMILY[application]} job types")
    target = math.log(max(per_gpu_batch, 1.0))
    return min(choices, key=lambda c: (abs(math.log(c[0]) - target), c[0]))[1]


def read_sia(path: Path, ctx: ReadContext, name: str) -> Workload:
    """Read one Sia workload file (see the module docstring for the approximations)."""
    rows: list[JobRow] = []
    families = _family_batches(ctx.throughputs)
    for line, _index, cols, f in iter_csv(path, ctx, REQUIRED):
        try:
            job_id = f[cols["name"]].strip()
            if not job_id:
                raise RowError("name", "empty job name")
            submit = parse_float(f[cols["time"]], "time", min_value=0.0)
            app = f[cols["application"]].strip()
            if app not in SIA_FAMILY:
                raise RowError(
                    "application", f"unknown application {app!r}; known: {', '.join(SIA_FAMILY)}"
                )
            replicas = parse_int(f[cols["num_replicas"]], "num_replicas", min_value=1)
            batch = parse_int(f[cols["batch_size"]], "batch_size", min_value=1)
            job_type = sia_job_type(ctx.throughputs, app, batch / replicas, families)
        except RowError as err:
            ctx.fail(line, err.field_name, err.message)
            continue
        rows.append(
            JobRow(
                line, job_id, submit, replicas,
                duration_s=SIA_GPU_HOURS[app] * 3600.0 / replicas,
                job_type=job_type,
                extra={"application": app, "batch_size": str(batch)},
            )
        )
    ctx.notes.append(
        "Sia workload: job types and durations approximated from application and GPU-time "
        "class (no durations in the file; see tessera.workload.readers.sia)"
    )
    return build_workload(rows, ctx, name)


def _sniff(path: Path, header: list[str] | None) -> bool:
    return header is not None and {"application", "num_replicas", "batch_size"} <= set(header)


register_reader(
    TraceReader("sia", read_sia, _sniff),
    "Sia SOSP'23 workload (name, time, application, num_replicas, batch_size); "
    "types and durations approximated.",
)
