"""Which trace is this? Format registry, detection from file contents, and known trace names.

``tessera analyze`` accepts three kinds of TRACE argument:

* a **trace name** such as ``philly`` or ``fgd`` — the registry ``simulate`` and ``lessons``
  use too (:mod:`tessera.workload.known`), so a name means the same data in every command.
  Bundled names always work; the others are looked up in the public data folder by the rule of
  :mod:`tessera.workload.datadir` (``$TESSERA_DATA_DIR``, else ``shared/data`` nearby). A name
  wins over a path of the same spelling (write ``./philly`` for the path);
* a **folder** — recognised by a marker file (``philly_jobs_pollux.csv``, ``raw/cluster01.csv``,
  ``openb_pod_list_default.csv`` ...);
* a **file** — recognised by its header line (or, for header-less files, by the shape of the
  first line: PAI's five comma-separated fields, Gavel's ten tab-separated ones).

Detection reads one line, never the whole file. ``--format`` skips detection. Anything that
matches no format is a :class:`~tessera.errors.TraceFormatError` listing the formats we know.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tessera.analyze import benchmark_loaders, helios, loaders
from tessera.analyze.trace import Trace
from tessera.errors import SpecError, TraceFormatError
from tessera.workload.known import resolve_named, unknown_trace_message


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """One readable trace format.

    Attributes:
        key: the ``--format`` value.
        description: one line for ``--help`` and error messages.
        load: reads a file or folder of this format.
    """

    key: str
    description: str
    load: Callable[[Path], Trace]


FORMATS: dict[str, TraceFormat] = {
    f.key: f
    for f in (
        TraceFormat("philly", "Philly job table (Pollux) + node sequence", loaders.philly),
        TraceFormat("philly-slice", "a slice of the Philly table with job ids (the bundled "
                    "week)", loaders.philly_slice),
        TraceFormat("philly-runtime", "Philly runtimes (Alibaba NSDI'22)", loaders.philly_runtime),
        TraceFormat("philly-gavel", "Philly (duration, GPUs) distribution (Gavel)",
                    loaders.philly_gavel),
        TraceFormat("philly-nodes", "Philly active/total nodes per minute", loaders.philly_nodes),
        TraceFormat("itp", "Microsoft ITP 2021 (ElasticFlow) clusterNN.csv", loaders.itp),
        TraceFormat("fgd", "Alibaba FGD 2023 pod and node lists", loaders.fgd),
        TraceFormat("pai-2020", "Alibaba PAI 2020 machine table", loaders.pai_2020),
        TraceFormat("spot-2026", "Alibaba spot-GPU 2026 node inventory", loaders.spot_2026),
        TraceFormat("helios", "SenseTime Helios summaries", helios.load),
        TraceFormat("sia", "Sia SOSP'23 workload-N.csv", benchmark_loaders.sia),
        TraceFormat("gavel", "Gavel 10-column TSV .trace", benchmark_loaders.gavel),
    )
}

# Header line (exact, or a prefix ending in ",") -> format key.
_HEADERS: tuple[tuple[str, str], ...] = (
    ("timestamp,duration,num_gpus,gpu_time,cluster", "philly"),
    ("job_id,timestamp,duration,num_gpus,gpu_time,cluster", "philly-slice"),
    ("runtime", "philly-runtime"),
    ("duration_s,num_gpus", "philly-gavel"),
    ("time,active,total", "philly-nodes"),
    ("job_id,submission_time,", "itp"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli", "fgd"),
    ("sn,cpu_milli,memory_mib,gpu,model", "fgd"),
    ("gpu_model,gpu_capacity_num,cpu_num,node_name", "spot-2026"),
    ("id,gpu_num,job_num,", "helios"),
    ("name,time,application,num_replicas,batch_size", "sia"),
)

# Folder marker (relative path or glob) -> format key, checked in order.
_MARKERS: tuple[tuple[str, str], ...] = (
    (loaders.PHILLY_JOBS, "philly"),
    ("raw/cluster[0-9]*.csv", "itp"),
    ("cluster[0-9]*.csv", "itp"),
    (loaders.FGD_PODS, "fgd"),
    ("pai_machine_spec.csv", "pai-2020"),
    (helios.SUMMARY_FILE, "helios"),
    ("node_info_df.csv", "spot-2026"),
    ("workload-*.csv", "sia"),
    ("*/workload-*.csv", "sia"),
    ("*.trace", "gavel"),
)


def _first_line(path: Path) -> str:
    with path.open("rb") as f:
        return f.readline(65536).decode("utf-8", "replace").rstrip("\r\n")


def _sniff_file(path: Path) -> str | None:
    line = _first_line(path)
    for header, key in _HEADERS:
        if line == header or line.startswith(header if header.endswith(",") else header + ","):
            return key
    if line.startswith("date,") and line.endswith(",total"):
        return "helios"
    tabs = line.split("\t")
    if len(tabs) == 10:
        return "gavel"
    fields = line.split(",")
    if len(fields) == 5 and fields[1].isalnum() and all(f.isdigit() for f in fields[2:]):
        return "pai-2020"
    return None


def _sniff_dir(path: Path) -> str | None:
    for marker, key in _MARKERS:
        if any(path.glob(marker)):
            return key
    return None


def detect_format(path: Path) -> str:
    """The format key of a trace file or folder.

    Raises:
        TraceFormatError: the path does not exist or matches no known format.
    """
    if not path.exists():
        raise TraceFormatError(str(path), None, None, "no such file or folder")
    key = _sniff_dir(path) if path.is_dir() else _sniff_file(path)
    if key is None:
        what = "folder" if path.is_dir() else "file (first line not recognised)"
        raise TraceFormatError(
            str(path),
            None if path.is_dir() else 1,
            None,
            f"unknown trace format for this {what}; known formats: {', '.join(FORMATS)} "
            f"(pass --format to force one)",
        )
    return key


def resolve(trace: str) -> tuple[Path, str | None]:
    """Turn a TRACE argument into a path, and the format when it was a trace name.

    Raises:
        SpecError: a trace name whose public data is not present (the message names the file
            and every folder searched).
    """
    named = resolve_named(trace)
    if named is not None:
        return named[1], named[0].analyze_format
    return Path(trace), None


def load_trace(trace: str | Path, format: str | None = None) -> Trace:
    """Load a trace given a path or trace name, detecting its format unless one is given.

    Args:
        trace: a file, a folder, or a name from :data:`tessera.workload.known.TRACES`.
        format: a key of :data:`FORMATS` to skip detection.

    Raises:
        TraceFormatError: unknown format, or any problem inside the file.
        SpecError: neither a path nor a trace name, or a trace name whose public data is not
            present.
    """
    path, known = resolve(str(trace))
    if format is not None and format not in FORMATS:
        raise TraceFormatError(
            str(path), None, None, f"unknown --format {format!r}; known: {', '.join(FORMATS)}"
        )
    if not path.exists():
        raise SpecError(unknown_trace_message(str(trace)))
    key = format or known or detect_format(path)
    return FORMATS[key].load(path)
