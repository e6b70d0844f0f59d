"""Alibaba GPU-sharing tasks (FGD, ATC'23): fractional GPUs and GPU-type constraints.

Columns (``openb_pod_list_*.csv``): ``name``, ``cpu_milli``, ``memory_mib``, ``num_gpu`` (0..8),
``gpu_milli`` (share of one GPU for 1-GPU tasks, 1000 = whole), ``gpu_spec`` (allowed GPU models,
``|``-separated, empty = any), ``qos``, ``pod_phase``, ``creation_time``, ``deletion_time``,
``scheduled_time`` (s from trace start).

Conversions:

* **id** -- ``name``; **submit** -- ``creation_time``; rows sorted by it (noted).
* **duration** -- ``deletion_time - scheduled_time``: the time the task held its GPU. Tasks still
  running at the end of the trace are cut at the trace end, as upstream records them.
* **fractional GPUs** -- a task with ``gpu_milli < 1000`` is a 1-GPU job with
  ``JobSpec.gpu_milli`` set (``JobSpec`` counts whole GPUs; the sharing layer reads the share).
  ``cpu_milli``, ``memory_mib``, ``qos`` and ``pod_phase`` are kept verbatim in ``extra``.
* **GPU-type constraints** -- each model in ``gpu_spec`` is mapped to a catalog flavor
  (:data:`FGD_GPU_MODELS`: V100M16 → V100-16GB, V100M32 → V100-32GB, P100, T4, A10; any catalog
  name or alias is accepted too). ``G1``/``G2``/``G3`` are GPU models Alibaba did not disclose;
  they are dropped from the constraint (the raw spec stays in ``extra["gpu_spec"]``). Any other
  model name is an error naming the field.
* **tenant** -- the trace has no owner column: every task is in queue ``default``.

Rows removed by rule (counted in ``Workload.notes``, never silently):

* ``num_gpu == 0`` -- CPU-only tasks (13 % of the default trace);
* no ``scheduled_time`` -- pods still *Pending* at trace end never ran, so they have no duration;
* zero run time (``deletion_time == scheduled_time``) -- no work to simulate;
* constrained *only* to undisclosed models (``G2``, ``G3`` ...): no catalog flavor can satisfy
  them, and dropping the constraint would silently widen it.

``openb_pod_list_multigpu50.csv`` has no time columns (it is a task-mix resampling) and is
rejected for its missing ``creation_time`` column.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tessera.errors import UnknownFlavorError
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import Workload
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

REQUIRED: tuple[str, ...] = (
    "name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time",
)
KEPT: tuple[str, ...] = ("cpu_milli", "memory_mib", "qos", "pod_phase", "gpu_spec")

FGD_GPU_MODELS: Mapping[str, str] = {
    "V100M16": "Tesla-V100-SXM2-16GB",
    "V100M32": "Tesla-V100-SXM2-32GB",
    "P100": "Tesla-P100-PCIE-16GB",
    "T4": "Tesla-T4",
    "A10": "NVIDIA-A10",
}
"""FGD's GPU model codes → catalog flavor names (V100M16 = V100 16 GB, as in Alibaba's PAI)."""
UNDISCLOSED_MODELS: frozenset[str] = frozenset({"G1", "G2", "G3"})
"""Models Alibaba did not name; they have no catalog flavor."""


def map_gpu_spec(spec: str) -> tuple[tuple[GpuFlavor, ...], bool]:
    """Map a ``gpu_spec`` to catalog flavors (ordered, no repeats).

    Returns:
        ``(flavors, had_undisclosed)``.

    Raises:
        RowError: a model that is neither an FGD code nor a catalog flavor.
    """
    out: list[GpuFlavor] = []
    undisclosed = False
    for raw in spec.split("|"):
        model = raw.strip()
        if not model:
            continue
        if model in UNDISCLOSED_MODELS:
            undisclosed = True
            continue
        try:
            flavor = resolve_flavor(FGD_GPU_MODELS.get(model, model))
        except UnknownFlavorError:
            known = ", ".join([*FGD_GPU_MODELS, *sorted(UNDISCLOSED_MODELS)])
            raise RowError(
                "gpu_spec", f"unknown GPU model {model!r} (FGD models: {known})"
            ) from None
        if flavor not in out:
            out.append(flavor)
    return tuple(out), undisclosed


def _parse_row(line: int, cols: dict[str, int], f: list[str], ctx: ReadContext) -> JobRow | None:
    num_gpus = parse_int(f[cols["num_gpu"]], "num_gpu", min_value=0)
    if num_gpus == 0:
        ctx.filter("CPU-only tasks (num_gpu = 0)")
        return None
    milli = parse_int(f[cols["gpu_milli"]], "gpu_milli", min_value=0)
    if not 0 < milli <= 1000:
        raise RowError("gpu_milli", f"must be in 1..1000, got {f[cols['gpu_milli']]!r}")
    created = parse_float(f[cols["creation_time"]], "creation_time", min_value=0.0)
    sched_text = f[cols["scheduled_time"]].strip()
    if not sched_text:
        ctx.filter("never scheduled (Pending at trace end, no run time)")
        return None
    scheduled = parse_float(sched_text, "scheduled_time", min_value=created)
    deleted = parse_float(f[cols["deletion_time"]], "deletion_time", min_value=scheduled)
    flavors: tuple[GpuFlavor, ...] = ()
    if "gpu_spec" in cols and f[cols["gpu_spec"]].strip():
        flavors, undisclosed = map_gpu_spec(f[cols["gpu_spec"]])
        if not flavors and undisclosed:
            ctx.filter("constrained only to undisclosed GPU models (G1/G2/G3)")
            return None
    if deleted == scheduled:
        ctx.filter("zero run time (deletion_time = scheduled_time)")
        return None
    job_id = f[cols["name"]].strip()
    if not job_id:
        raise RowError("name", "empty task name")
    extra = {k: f[cols[k]].strip() for k in KEPT if k in cols and f[cols[k]].strip()}
    if num_gpus > 1 and milli != 1000:
        raise RowError("gpu_milli", f"multi-GPU tasks use whole GPUs (1000), got {milli}")
    return JobRow(
        line, job_id, created, num_gpus, duration_s=deleted - scheduled, flavors=flavors,
        extra=extra, gpu_milli=milli if milli < 1000 else None,
    )


def read_fgd(path: Path, ctx: ReadContext, name: str) -> Workload:
    """Read an FGD pod list (see the module docstring for every rule)."""
    rows: list[JobRow] = []
    for line, _index, cols, f in iter_csv(path, ctx, REQUIRED):
        try:
            row = _parse_row(line, cols, f, ctx)
        except RowError as err:
            ctx.fail(line, err.field_name, err.message)
            continue
        if row is not None:
            rows.append(row)
    fractional = sum(1 for r in rows if r.gpu_milli is not None)
    constrained = sum(1 for r in rows if r.flavors)
    ctx.notes.append(
        f"{fractional} fractional-GPU tasks (gpu_milli < 1000); "
        f"{constrained} tasks with a GPU-type constraint"
    )
    return build_workload(rows, ctx, name)


def _sniff(path: Path, header: list[str] | None) -> bool:
    return header is not None and {"name", "num_gpu", "gpu_milli"} <= set(header)


register_reader(
    TraceReader("fgd", read_fgd, _sniff),
    "Alibaba FGD 2023 pod list: fractional GPUs (gpu_milli), GPU-type constraints (gpu_spec).",
)
