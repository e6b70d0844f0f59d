"""Trace names: one registry that ``simulate``, ``lessons``, ``analyze`` and ``traces`` share.

A name means the same data in every command. Each :class:`NamedTrace` says where its file is
(bundled inside ``tessera/data``, or under the public data folder found by
:mod:`tessera.workload.datadir`), whether it is a job list the simulator can replay, and which
``tessera analyze`` format reads it.

=======================  =========================================================  =========
name                     data                                                       bundled
=======================  =========================================================  =========
``philly``               one week of the Philly job table, 3,322 jobs               yes
``philly-full``          ``traces/philly/philly_jobs_pollux.csv`` (82,247 jobs)
``itp``                  ``traces/microsoft_itp_elasticflow/raw/`` (10 clusters)
``itp-clusterNN``        one ITP cluster, ``01`` .. ``10``
``fgd``                  ``traces/alibaba_gpu_2023/openb_pod_list_default.csv``
``fgd-<variant>``        ``openb_pod_list_<variant>.csv`` (``gpuspec33`` ...)
``sia-philly-1``         Sia's first Philly-derived workload (160 jobs)             yes
``sia-<set>-<n>``        ``traces/sia_workloads/<set>/workload-<n>.csv``
``philly-runtime``       Philly runtimes (analyze only)
``philly-gavel``         Gavel's Philly (duration, GPUs) distribution (analyze only)
``philly-nodes``         Philly active/total nodes per minute (analyze only)
``pai-2020``             Alibaba PAI 2020 machine table (analyze only)              yes
``spot-2026``            Alibaba spot-GPU node inventory (analyze only)
``helios``               SenseTime Helios summaries (analyze only)
``sia``                  every Sia workload, one tenant per set (analyze only)
=======================  =========================================================  =========

"Analyze only" names hold no job list to replay (runtimes, inventories, summaries, or several
independent workloads); ``simulate`` rejects them with a message saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tessera.errors import SpecError
from tessera.workload.datadir import find_data, missing_data_message

BUNDLED_PHILLY = "philly_slice.csv"
"""File name of the bundled Philly week inside ``tessera/data/workloads``."""


@dataclass(frozen=True, slots=True)
class NamedTrace:
    """One trace name and where its data is.

    Attributes:
        name: what the user types (``-t NAME``, ``tessera analyze NAME``).
        description: one line for ``tessera traces``.
        path: the file or folder, relative to ``tessera/data`` when ``bundled``, else to the
            public data folder.
        bundled: whether the data ships with the package (always available).
        reader: the ``tessera.workload`` reader for a job list the simulator can replay;
            ``None`` for data only ``tessera analyze`` reads.
        analyze_format: the ``tessera analyze`` format key that reads it.
        family: the row label of a numbered family in the short listing (``itp-cluster01..10``);
            ``None`` for a name listed on its own.
    """

    name: str
    description: str
    path: str
    bundled: bool
    reader: str | None
    analyze_format: str
    family: str | None = None

    @property
    def commands(self) -> tuple[str, ...]:
        """The commands that accept this name."""
        return ("simulate", "lessons", "analyze") if self.reader else ("analyze",)


def _registry() -> tuple[NamedTrace, ...]:
    philly = "traces/philly"
    itp = "traces/microsoft_itp_elasticflow/raw"
    fgd = "traces/alibaba_gpu_2023"
    sia = "traces/sia_workloads"
    out = [
        NamedTrace("philly", "Philly, one week of the job table (3,322 jobs)",
                   f"workloads/{BUNDLED_PHILLY}", True,
                   "philly", "philly-slice"),
        NamedTrace("philly-full", "Philly job table, Pollux artifact (82,247 jobs)",
                   f"{philly}/philly_jobs_pollux.csv", False, "philly", "philly"),
        NamedTrace("itp", "Microsoft ITP 2021, 10 clusters (ElasticFlow)", itp, False,
                   "itp", "itp"),
    ]
    out += [
        NamedTrace(f"itp-cluster{i:02d}", "Microsoft ITP, one cluster's jobs",
                   f"{itp}/cluster{i:02d}.csv", False, "itp", "itp", "itp-cluster01..10")
        for i in range(1, 11)
    ]
    out.append(NamedTrace("fgd", "Alibaba FGD 2023 GPU-sharing tasks",
                          f"{fgd}/openb_pod_list_default.csv", False, "fgd", "fgd"))
    out += [
        NamedTrace(f"fgd-{v}", f"Alibaba FGD 2023 tasks, {v} resampling",
                   f"{fgd}/openb_pod_list_{v}.csv", False, "fgd", "fgd")
        for v in ("gpuspec05", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33", "gpushare100")
    ]
    out.append(NamedTrace("sia-philly-1", "Sia SOSP'23 workload, philly set #1",
                          "workloads/sia-philly-1.csv", True, "sia", "sia"))
    for group, count, first in (("philly", 8, 2), ("saturn", 10, 1), ("newtrace", 10, 1)):
        out += [
            NamedTrace(f"sia-{group}-{n}", f"Sia SOSP'23 workloads, {group} set",
                       f"{sia}/{group}/workload-{n}.csv", False, "sia", "sia",
                       f"sia-{group}-{first}..{count}")
            for n in range(first, count + 1)
        ]
    out += [
        NamedTrace("philly-runtime", "Philly runtimes (Alibaba NSDI'22)",
                   f"{philly}/philly_runtime_alibaba.csv", False, None, "philly-runtime"),
        NamedTrace("philly-gavel", "Philly (duration, GPUs) distribution (Gavel)",
                   f"{philly}/philly_job_distribution_gavel.csv", False, None, "philly-gavel"),
        NamedTrace("philly-nodes", "Philly active/total nodes per minute",
                   f"{philly}/philly_node_sequence.csv", False, None, "philly-nodes"),
        NamedTrace("pai-2020", "Alibaba PAI 2020 machine table",
                   "clusters/pai_machine_spec.csv", True, None, "pai-2020"),
        NamedTrace("spot-2026", "Alibaba spot-GPU 2026 node inventory",
                   "traces/alibaba_spot_gpu_2026/node_info_df.csv", False, None, "spot-2026"),
        NamedTrace("helios", "SenseTime Helios cluster summaries", "traces/helios", False,
                   None, "helios"),
        NamedTrace("sia", "every Sia SOSP'23 workload (tenant = set)", sia, False, None, "sia"),
    ]
    return tuple(out)


TRACES: dict[str, NamedTrace] = {t.name: t for t in _registry()}
"""Every trace name, in listing order."""


def job_trace_labels() -> list[str]:
    """The names ``simulate`` and ``lessons`` accept, a numbered family as one label."""
    labels = [t.family or t.name for t in TRACES.values() if t.reader is not None]
    return list(dict.fromkeys(labels))


def bundled_path(relative: str) -> Path:
    """Path of a file bundled in ``tessera/data`` (inside the installed package)."""
    return Path(str(resources.files("tessera.data").joinpath(relative)))


def bundled_philly_path() -> Path:
    """Path of the bundled Philly week."""
    return bundled_path(f"workloads/{BUNDLED_PHILLY}")


def locate(trace: NamedTrace) -> Path | None:
    """Where ``trace``'s data is on this machine, or ``None`` when it is not there."""
    if trace.bundled:
        return bundled_path(trace.path)
    return find_data(trace.path)


def resolve_named(name: str) -> tuple[NamedTrace, Path] | None:
    """The registry entry and data path for ``name``; ``None`` if ``name`` is not a trace name.

    Raises:
        SpecError: the name is known but its public data is not present (the message names
            the file, every folder searched and ``TESSERA_DATA_DIR``).
    """
    trace = TRACES.get(name)
    if trace is None:
        return None
    path = locate(trace)
    if path is None:
        raise SpecError(missing_data_message(f"trace {name!r}", trace.path))
    return trace, path


def unknown_trace_message(text: str) -> str:
    """The error text for a TRACE that is neither an existing path nor a trace name."""
    bundled = ", ".join(t.name for t in TRACES.values() if t.bundled)
    return (
        f"no trace file or folder {text!r} and no trace by that name; `tessera traces` lists "
        f"the names (bundled: {bundled})"
    )


@dataclass(frozen=True, slots=True)
class KnownTrace:
    """One row of ``tessera traces``: a trace name and whether its data is on this machine.

    Attributes:
        trace: the registry entry.
        path: where its data is, or ``None`` when the public data is not there.
        num_rows: data rows in the file(s) of a job trace (before any filtering); ``None`` when
            absent or not a job list.
        label: the name column (a family label such as ``itp-cluster01..10``, or the name).
    """

    trace: NamedTrace
    path: Path | None
    num_rows: int | None
    label: str

    @property
    def name(self) -> str:
        """The trace name (the first of a family)."""
        return self.trace.name

    @property
    def status(self) -> str:
        """``bundled``, ``found`` (in the public data folder) or ``missing``."""
        if self.trace.bundled:
            return "bundled"
        return "found" if self.path is not None else "missing"


def _count_rows(path: Path) -> int:
    files = sorted(path.rglob("*.csv")) if path.is_dir() else [path]
    total = 0
    for f in files:
        with f.open("rb") as fh:
            lines = sum(1 for line in fh if line.strip())
        total += max(0, lines - 1)  # minus the header
    return total


def list_known_traces(expand: bool = False) -> list[KnownTrace]:
    """Every trace name with its data location and, for job traces present, the row count.

    Args:
        expand: one row per name; by default a numbered family (``itp-cluster01..10``) is one
            row, described by its first member.
    """
    out: list[KnownTrace] = []
    seen: set[str] = set()
    for trace in TRACES.values():
        if not expand and trace.family is not None:
            if trace.family in seen:
                continue
            seen.add(trace.family)
        path = locate(trace)
        rows = _count_rows(path) if path is not None and trace.reader is not None else None
        label = trace.name if expand or trace.family is None else trace.family
        out.append(KnownTrace(trace, path, rows, label))
    return out
