"""Microsoft ITP jobs (ElasticFlow, ASPLOS'23): one CSV per cluster, 10 clusters.

Raw columns: ``job_id`` (UUID), ``submission_time`` (s, common origin across clusters),
``duration`` (s) and ``num_gpu``. ElasticFlow's *generated* copies add random ``model_name``,
``num_iteration``, ``deadline`` and ``batch_size``; those are kept as annotations only.

Conversions:

* **tenant** -- the file is one ITP cluster, the only tenant-like field the trace has:
  ``cluster04.csv`` puts its jobs in queue ``cluster04``. A directory of cluster files is one
  workload (all clusters merged on their common clock).
* **times** -- ``submission_time`` as given (not re-zeroed: the origin is shared by all
  clusters). Rows are sorted by submit time (stably) and the sort is noted.
* **deadline** (generated files) -- ``slo_factor = (deadline - submission) / duration``, Gavel's
  SLO convention; ``model_name``/``batch_size``/``num_iteration`` go to ``JobSpec.extra``.
* **work** -- duration × reference throughput; job types by the stable-hash rule (ITP's
  ``model_name`` is synthetic and names models Gavel never profiled).
"""

from __future__ import annotations

from pathlib import Path

from tessera.errors import TraceFormatError
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

REQUIRED: tuple[str, ...] = ("job_id", "submission_time", "duration", "num_gpu")
ANNOTATIONS: tuple[str, ...] = ("model_name", "batch_size", "num_iteration")


def _read_file(path: Path, ctx: ReadContext, rows: list[JobRow], multi: bool) -> None:
    queue = path.stem
    source = str(path) if multi else None
    for line, _index, cols, f in iter_csv(path, ctx, REQUIRED):
        try:
            job_id = f[cols["job_id"]].strip()
            if not job_id:
                raise RowError("job_id", "empty job id")
            submit = parse_float(f[cols["submission_time"]], "submission_time", min_value=0.0)
            duration = parse_float(f[cols["duration"]], "duration")
            if duration <= 0:
                raise RowError("duration", f"must be > 0 s, got {f[cols['duration']]!r}")
            num_gpus = parse_int(f[cols["num_gpu"]], "num_gpu", min_value=1)
            slo = None
            if "deadline" in cols:
                deadline = parse_float(f[cols["deadline"]], "deadline")
                slo = (deadline - submit) / duration
                if slo <= 0:
                    raise RowError("deadline", f"deadline {deadline:g} is not after submission")
            host = host_columns(cols, f)
        except RowError as err:
            ctx.fail(line, err.field_name, err.message)
            continue
        extra = {k: f[cols[k]].strip() for k in ANNOTATIONS if k in cols}
        rows.append(
            JobRow(line, job_id, submit, num_gpus, duration_s=duration, queue=queue,
                   slo_factor=slo, extra=extra, source=source, host=host)
        )


def read_itp(path: Path, ctx: ReadContext, name: str) -> Workload:
    """Read one ITP cluster file, or a directory of them as one workload."""
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    if not files:
        raise TraceFormatError(str(path), None, None, "directory holds no .csv files")
    rows: list[JobRow] = []
    top = ctx.path
    for f in files:
        ctx.path = str(f)  # errors name the cluster file they are in
        _read_file(f, ctx, rows, multi=path.is_dir())
    ctx.path = top
    if len(files) > 1:
        ctx.notes.append(
            f"merged {len(files)} cluster files ({files[0].stem} .. {files[-1].stem}); "
            "queue = cluster file name"
        )
    return build_workload(rows, ctx, name)


def _sniff(path: Path, header: list[str] | None) -> bool:
    return header is not None and set(REQUIRED) <= set(header)


register_reader(
    TraceReader("itp", read_itp, _sniff, multi_file=True),
    "Microsoft ITP (ElasticFlow) jobs: job_id, submission_time, duration, num_gpu; a directory "
    "of clusterNN.csv is one workload.",
)
