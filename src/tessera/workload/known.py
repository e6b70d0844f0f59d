"""Traces known by name: the bundled Philly slice, and the public traces under ``shared/data``.

``load_trace("philly")`` always works: it reads a compact slice of the Philly table bundled with
Tessera (``tessera/data/workloads/``, see its NOTICE). The other names point at the public
traces, which are looked for in a data directory, first match wins:

1. ``$TESSERA_DATA_DIR`` (a directory holding ``traces/``);
2. ``shared/data`` next to the repository (``<repo>/../shared/data``);
3. ``shared/data`` under the current directory or its parent.

A name whose file is missing raises a :class:`~tessera.errors.SpecError` saying where it looked.

=====================  ===================================================================
name                   trace
=====================  ===================================================================
``philly``             bundled Philly slice (see NOTICE); always available
``philly-full``        ``traces/philly/philly_jobs_pollux.csv`` (82,247 jobs)
``itp``                ``traces/microsoft_itp_elasticflow/raw/`` -- all 10 clusters
``itp-clusterNN``      one ITP cluster (``01`` .. ``10``)
``fgd``                ``traces/alibaba_gpu_2023/openb_pod_list_default.csv``
``fgd-<variant>``      ``openb_pod_list_<variant>.csv`` (``gpuspec33``, ``gpushare100`` ...)
``sia-<set>-<n>``      ``traces/sia_workloads/<set>/workload-<n>.csv`` (philly, saturn, newtrace)
=====================  ===================================================================
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tessera.errors import SpecError

BUNDLED_PHILLY = "philly_slice.csv"
"""File name of the bundled Philly slice inside ``tessera/data/workloads``."""

_FIXED: dict[str, tuple[str, str]] = {
    "philly-full": ("traces/philly/philly_jobs_pollux.csv", "Philly job table, Pollux artifact"),
    "itp": ("traces/microsoft_itp_elasticflow/raw", "Microsoft ITP, 10 clusters (ElasticFlow)"),
    "fgd": ("traces/alibaba_gpu_2023/openb_pod_list_default.csv", "Alibaba FGD 2023 tasks"),
}
_FGD_VARIANTS = ("gpuspec05", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33", "gpushare100")
_SIA_SETS = {"philly": 8, "saturn": 10, "newtrace": 10}


@dataclass(frozen=True, slots=True)
class KnownTrace:
    """One row of ``tessera traces``.

    Attributes:
        name: what to pass to ``load_trace``.
        description: one line.
        location: a file path, or ``"bundled"``; ``None`` when the data is not present.
        num_jobs: job rows in the file (counted, not parsed); ``None`` when absent.
    """

    name: str
    description: str
    location: str | None
    num_jobs: int | None


def bundled_philly_path() -> Path:
    """Path of the bundled Philly slice (inside the installed package)."""
    ref = resources.files("tessera.data").joinpath(f"workloads/{BUNDLED_PHILLY}")
    return Path(str(ref))


def data_dirs() -> list[Path]:
    """Candidate data directories, in search order."""
    out: list[Path] = []
    env = os.environ.get("TESSERA_DATA_DIR")
    if env:
        out.append(Path(env))
    here = Path(__file__).resolve()
    if len(here.parents) > 4:
        out.append(here.parents[4] / "shared" / "data")  # <repo>/src/tessera/workload/known.py
    cwd = Path.cwd()
    out += [cwd / "shared" / "data", cwd.parent / "shared" / "data"]
    return out


def find_data(relative: str) -> Path | None:
    """The first existing ``<data dir>/<relative>``, or ``None``."""
    for d in data_dirs():
        p = d / relative
        if p.exists():
            return p
    return None


def _relative_for(name: str) -> tuple[str, str] | None:
    if name in _FIXED:
        return _FIXED[name]
    m = re.fullmatch(r"itp-cluster(\d\d)", name)
    if m and 1 <= int(m.group(1)) <= 10:
        return (
            f"traces/microsoft_itp_elasticflow/raw/cluster{m.group(1)}.csv",
            f"Microsoft ITP cluster {m.group(1)}",
        )
    m = re.fullmatch(r"fgd-(\w+)", name)
    if m and m.group(1) in _FGD_VARIANTS:
        return (
            f"traces/alibaba_gpu_2023/openb_pod_list_{m.group(1)}.csv",
            f"Alibaba FGD 2023 tasks, {m.group(1)} resampling",
        )
    m = re.fullmatch(r"sia-(\w+)-(\d+)", name)
    if m and m.group(1) in _SIA_SETS and 1 <= int(m.group(2)) <= _SIA_SETS[m.group(1)]:
        return (
            f"traces/sia_workloads/{m.group(1)}/workload-{m.group(2)}.csv",
            f"Sia SOSP'23 workload, {m.group(1)} set #{m.group(2)}",
        )
    return None


def known_names() -> list[str]:
    """Every trace name ``load_trace`` accepts."""
    names = ["philly", *_FIXED]
    names += [f"itp-cluster{i:02d}" for i in range(1, 11)]
    names += [f"fgd-{v}" for v in _FGD_VARIANTS]
    names += [f"sia-{s}-{i}" for s, n in _SIA_SETS.items() for i in range(1, n + 1)]
    return names


def resolve_known(name: str) -> Path | None:
    """The path for a known trace name; ``None`` if ``name`` is not a known name.

    Raises:
        SpecError: the name is known but its data is not present.
    """
    if name == "philly":
        return bundled_philly_path()
    rel = _relative_for(name)
    if rel is None:
        return None
    path = find_data(rel[0])
    if path is None:
        looked = ", ".join(str(d) for d in data_dirs())
        raise SpecError(
            f"trace {name!r} needs {rel[0]} in a data directory; looked in {looked} "
            "(set TESSERA_DATA_DIR)"
        )
    return path


def _count_rows(path: Path) -> int:
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    total = 0
    for f in files:
        with f.open("rb") as fh:
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
        total += max(0, len(lines) - 1)  # minus the header
    return total


def list_known_traces() -> list[KnownTrace]:
    """Every named trace with its description, location (or ``None``) and job-row count.

    Sia sets are listed once per set (their first workload) to keep the table short.
    """
    out = [
        KnownTrace(
            "philly",
            "Philly slice bundled with Tessera (see data/workloads/NOTICE.txt)",
            "bundled",
            _count_rows(bundled_philly_path()),
        )
    ]
    names = [*_FIXED, "itp-cluster01", *(f"fgd-{v}" for v in _FGD_VARIANTS)]
    names += [f"sia-{s}-1" for s in _SIA_SETS]
    for name in names:
        rel = _relative_for(name)
        assert rel is not None
        path = find_data(rel[0])
        out.append(
            KnownTrace(
                name,
                rel[1],
                str(path) if path else None,
                _count_rows(path) if path else None,
            )
        )
    return out
