"""Synergy-style workloads as CSV: what ``tessera traces generate --style synergy`` writes.

One row per job: ``job_id, submit_time_s, num_gpus, duration_s, synergy_model``, plus the
``synergy_class`` (image, language, speech) for readers. ``duration_s`` is the job's run time
at its GPU-proportional CPU and memory share; ``synergy_model`` names one of Synergy's profiled
models (``res18``, ``gnmt`` ...), whose profile (:mod:`tessera.perf.host_profiles`) becomes the
job's :class:`~tessera.model.resources.ResourceSensitivity`. Jobs are built exactly as
:func:`tessera.workload.synergy.generate_synergy_like` builds them, so a written workload
read back is the same workload.
"""

from __future__ import annotations

import csv
from pathlib import Path

from tessera.errors import SpecError
from tessera.model.jobs import JobId, JobSpec, Workload
from tessera.perf.host_profiles import synergy_profile
from tessera.perf.profiles import default_throughputs
from tessera.workload.csvio import iter_csv
from tessera.workload.registry import TraceReader, register_reader
from tessera.workload.rows import ReadContext, RowError, parse_float, parse_int
from tessera.workload.synergy import CARRIER_TYPE

REQUIRED: tuple[str, ...] = ("job_id", "submit_time_s", "num_gpus", "duration_s",
                             "synergy_model")


def write_synergy_csv(workload: Workload, path: Path) -> None:
    """Write a Synergy-style workload (every job needs ``model`` and ``duration_hint_s``)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([*REQUIRED, "synergy_class"])
        for j in workload.jobs:
            if j.model is None or j.duration_hint_s is None:
                raise SpecError(f"job {j.job_id}: a Synergy CSV row needs a model and duration")
            w.writerow([j.job_id, f"{j.submit_time_s:.0f}", j.num_gpus,
                        f"{j.duration_hint_s:.3f}", j.model, j.extra.get("synergy_class", "")])


def read_synergy_csv(path: Path, ctx: ReadContext, name: str) -> Workload:
    """Read a file :func:`write_synergy_csv` wrote (errors name the line and column)."""
    table = default_throughputs()
    rates: dict[int, float] = {}
    jobs: list[JobSpec] = []
    for line, _i, cols, f in iter_csv(path, ctx, REQUIRED):
        try:
            gpus = parse_int(f[cols["num_gpus"]], "num_gpus", min_value=1)
            submit = parse_float(f[cols["submit_time_s"]], "submit_time_s", min_value=0.0)
            duration = parse_float(f[cols["duration_s"]], "duration_s")
            if duration <= 0:
                raise RowError("duration_s", f"must be > 0 s, got {duration:g}")
            model = f[cols["synergy_model"]].strip()
            try:
                sens = synergy_profile(model, gpus).sensitivity
            except SpecError as e:
                raise RowError("synergy_model", str(e)) from None
        except RowError as err:
            ctx.fail(line, err.field_name, err.message)
            continue
        if gpus not in rates:
            rates[gpus] = table.throughput(CARRIER_TYPE, table.reference_flavor, gpus)
        extra = {"synergy_class": f[cols["synergy_class"]].strip()} if "synergy_class" in cols \
            else {}
        jobs.append(JobSpec(
            JobId(f[cols["job_id"]].strip()), CARRIER_TYPE, gpus,
            total_steps=float(max(1, round(duration * rates[gpus]))), submit_time_s=submit,
            duration_hint_s=duration, model=model, sensitivity=sens, extra=extra))
    return Workload(name=name, jobs=tuple(sorted(jobs, key=lambda j: j.submit_time_s)),
                    source=str(path), notes=tuple(ctx.notes))


def _sniff(path: Path, header: list[str] | None) -> bool:
    return header is not None and set(REQUIRED) <= set(header)


register_reader(
    TraceReader("synergy", read_synergy_csv, _sniff),
    "Synergy-style jobs (tessera traces generate --style synergy): job_id, submit_time_s, "
    "num_gpus, duration_s, synergy_model; each job gets its model's CPU/memory profile.",
)
