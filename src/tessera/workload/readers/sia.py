"""Sia (SOSP'23) evaluation workloads: real submit times, synthetic models and sizes.

Columns: ``name`` (``<app>-<n>``), ``time`` (submit, s from workload start), ``application``
(bert | cifar10 | deepspeech2 | imagenet | yolov3), ``num_replicas`` (GPUs asked for at first),
``batch_size`` (initial global batch).

Sia's simulator trains each application to a quality target with its own models, so the file
carries **no duration**. Tessera derives the job type and the work by documented rules (noted in
``Workload.notes``):

* **job type** -- the application itself when the throughput table profiles it (the Sia table,
  ``--throughputs sia``: ``imagenet (batch size 40)``), else the closest Gavel family
  (:data:`SIA_FAMILY`: cifar10 → ResNet-18, imagenet and yolov3 → ResNet-50, bert →
  Transformer, deepspeech2 → LM); either way at the profiled batch size nearest (in log
  scale) to the per-GPU batch ``batch_size / num_replicas``.
* **duration** -- the job's length in Sia's own model, run rigid and alone at the trace's
  ``num_replicas`` and ``batch_size`` on the table's reference flavor (V100): the steps the
  application's validation curve at ``batch_size`` took to reach its target (interpolated in
  samples between the two measured batches around it), times the measured
  iteration time on that many GPUs packed on 8-GPU servers, with gradient accumulation when a
  GPU's share exceeds its largest measured local batch
  (:func:`tessera.workload.elastic.rigid_duration_s`). The step budget is then
  ``duration × table throughput`` as for every trace.
* **elastic** -- the file has no column saying which jobs adapt: Sia's simulator treats every
  job as adaptive under Sia and Pollux and runs it at ``num_replicas`` / ``batch_size`` under
  its rigid baselines. So every job whose model has efficiency data gets an
  :class:`~tessera.model.jobs.ElasticRange` (1 GPU up to the batch-limited maximum, batch from
  ``batch_size`` to the largest profiled one; rigid policies ignore it).
* ``application`` and ``batch_size`` become ``JobSpec.model`` and ``JobSpec.batch_size``;
  queue is ``default``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

from tessera.errors import NoProfileError, SpecError
from tessera.model.jobs import ElasticRange, Workload
from tessera.perf.profiles import ThroughputTable
from tessera.workload.csvio import iter_csv
from tessera.workload.elastic import elastic_or_rigid, rigid_duration_s
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
    """Read one Sia workload file (see the module docstring for the rules)."""
    rows: list[JobRow] = []
    families = _family_batches(ctx.throughputs)
    flavor = ctx.throughputs.reference_flavor
    durations: dict[tuple[str, int, int], float] = {}
    ranges: dict[tuple[str, int, int], ElasticRange | None] = {}
    notes: set[str] = set()
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
            key = (app, replicas, batch)
            if key not in durations:
                try:
                    durations[key] = rigid_duration_s(app, flavor, replicas, batch)
                    ranges[key] = elastic_or_rigid(app, replicas, batch, notes)
                except SpecError as err:  # a batch outside the profiled range
                    raise RowError("batch_size", str(err)) from None
                except NoProfileError as err:  # a flavor or placement never measured
                    raise RowError(None, str(err)) from None
        except RowError as err:
            ctx.fail(line, err.field_name, err.message)
            continue
        rows.append(
            JobRow(
                line, job_id, submit, replicas,
                duration_s=durations[key],
                job_type=job_type,
                model=app, batch_size=batch,
                elastic=ranges[key],
            )
        )
    ctx.notes.append(
        "Sia workload: durations from each application's validation curve and measured step "
        f"times, rigid at the trace's GPU count and batch on {flavor}; every job with "
        "efficiency data is elastic (see tessera.workload.readers.sia)"
    )
    ctx.notes.extend(sorted(notes))
    return build_workload(rows, ctx, name)


def _sniff(path: Path, header: list[str] | None) -> bool:
    return header is not None and {"application", "num_replicas", "batch_size"} <= set(header)


register_reader(
    TraceReader("sia", read_sia, _sniff),
    "Sia SOSP'23 workload (name, time, application, num_replicas, batch_size); "
    "durations from validation curves and profiles, jobs elastic.",
)
