"""Reader for the Sia / Pollux step-time profiles.

Pollux (OSDI'21) and Sia (SOSP'23) measured, for each of seven training workloads, how long one
training iteration takes on a given GPU type as a function of two knobs: the *placement* (how many
GPUs on how many servers) and the *local batch* (samples per GPU per step). Each row says::

    placement=22, local_bsz=64  ->  step_time=0.31 s, of which sync_time=0.04 s

``placement`` is a digit string, one digit per server, giving the GPUs used there ("4" is one
server with 4 GPUs, "22" two servers with 2 GPUs each). ``step_time`` is the whole iteration;
``sync_time`` is the part spent synchronising gradients, so ``step_time - sync_time`` is the
compute part, which depends on the GPU type and the local batch but not on the placement.

Each profile file belongs to one GPU type, named by a suffix (``-azure`` = V100 …); this module
maps suffixes to Tessera flavors and hands back typed, column-oriented :class:`SiaProfile`
objects. Fitting lives in :mod:`tessera.perf.steptime`; nothing here interprets the numbers.

The files are bundled under ``tessera/data/sia`` (see its NOTICE.txt); a different copy can be
read by passing ``root``.

>>> p = load_sia_profile("imagenet", "V100")
>>> p.flavor.short, p.max_local_bsz
('V100-16GB', 600)
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from tessera.errors import NoProfileError, TraceFormatError
from tessera.model.gpus import GpuFlavor, resolve_flavor

#: Sia GPU suffix -> flavor (hardware named in Sia's simulator_config.py), resolved once here.
SIA_SUFFIX_FLAVOR: dict[str, GpuFlavor] = {
    suffix: resolve_flavor(name) for suffix, name in (
        ("aws", "T4"), ("azure", "V100-16GB"), ("dgx", "A100-40GB"), ("dgx-ext", "A100-40GB"),
        ("rtx", "RTX-2080Ti"), ("quad", "RTX-6000"))
}

#: GPUs per server of each profiled flavor in Sia's hardware (g4dn.12xlarge 4, ND40rs_v2 8,
#: DGX-A100 8, RTX 2080Ti servers 8, Quadro RTX 6000 servers 4): how its placements were laid out.
SIA_SERVER_GPUS: dict[str, int] = {
    "T4": 4,
    "V100-16GB": 8,
    "A100-40GB": 8,
    "RTX-2080Ti": 8,
    "RTX-6000": 4,
}


@dataclass(frozen=True, slots=True)
class SiaProfile:
    """All measurements of one model on one GPU flavor (several files may be merged).

    The columns are parallel tuples, one entry per measured row.

    Attributes:
        model: Sia's model folder name (``imagenet``, ``bert`` …).
        flavor: the GPU flavor measured.
        sources: the files the rows came from (``imagenet/placements-azure.csv``).
        placement: the placement string of each row.
        local_bsz: per-GPU batch (samples) of each row.
        step_time_s: whole-iteration time of each row.
        sync_time_s: gradient-synchronisation time of each row.
    """

    model: str
    flavor: GpuFlavor
    sources: tuple[str, ...]
    placement: tuple[str, ...]
    local_bsz: tuple[int, ...]
    step_time_s: tuple[float, ...]
    sync_time_s: tuple[float, ...]

    @property
    def n_rows(self) -> int:
        return len(self.local_bsz)

    @property
    def max_local_bsz(self) -> int:
        """The largest per-GPU batch measured: known to fit in this flavor's memory."""
        return max(self.local_bsz)

    def gpus(self, i: int) -> int:
        """Total GPUs used by row ``i`` (sum of the placement digits)."""
        return sum(int(c) for c in self.placement[i])

    def nodes(self, i: int) -> int:
        """Servers used by row ``i`` (number of placement digits)."""
        return len(self.placement[i])

    def rows_with_gpus(self, n_gpus: int) -> tuple[int, ...]:
        """Indices of rows that ran on exactly ``n_gpus`` GPUs."""
        return tuple(i for i in range(self.n_rows) if self.gpus(i) == n_gpus)


def _default_root() -> Traversable:
    return resources.files("tessera.data").joinpath("sia")


def _root(root: str | Path | None) -> Traversable:
    return _default_root() if root is None else Path(root)  # Path satisfies Traversable


def sia_models(root: str | Path | None = None) -> tuple[str, ...]:
    """The model folders available, sorted."""
    base = _root(root)
    return tuple(sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith(
        ("_", ".")
    )))


def _suffix_files(model_dir: Traversable) -> dict[str, Traversable]:
    out: dict[str, Traversable] = {}
    for f in model_dir.iterdir():
        name = f.name
        if name.startswith("placements-") and name.endswith(".csv"):
            out[name[len("placements-"):-len(".csv")]] = f
    return out


def sia_flavors(model: str, root: str | Path | None = None) -> tuple[GpuFlavor, ...]:
    """The flavors measured for ``model`` (deduplicated, in catalog order of first suffix)."""
    files = _suffix_files(model_dir(model, root))
    return _flavors_of(files)


def _flavors_of(files: dict[str, Traversable]) -> tuple[GpuFlavor, ...]:
    seen: dict[str, GpuFlavor] = {}
    for suffix in sorted(files):
        if suffix in SIA_SUFFIX_FLAVOR:
            f = SIA_SUFFIX_FLAVOR[suffix]
            seen.setdefault(f.name, f)
    return tuple(seen.values())


def model_dir(model: str, root: str | Path | None = None) -> Traversable:
    """The folder of ``model``'s files under ``root`` (bundled copy by default).

    Raises:
        NoProfileError: no such model; the message lists the profiled ones.
    """
    base = _root(root)
    d = base.joinpath(model)
    if not d.is_dir():
        known = ", ".join(sia_models(root))
        raise NoProfileError(f"no Sia profile for model {model!r}; profiled models: {known}")
    return d


def load_sia_profile(
    model: str, flavor: GpuFlavor, root: str | Path | None = None
) -> SiaProfile:
    """Every measured row of ``model`` on ``flavor``, merged over all files for that flavor.

    Raises:
        NoProfileError: the model or the (model, flavor) pair was never measured; the message
            lists what exists.
    """
    return _load_cached(model, flavor, None if root is None else str(root))


@lru_cache(maxsize=128)
def _load_cached(model: str, fl: GpuFlavor, root: str | None) -> SiaProfile:
    files = _suffix_files(model_dir(model, root))
    picked = [(s, f) for s, f in sorted(files.items()) if SIA_SUFFIX_FLAVOR.get(s) == fl]
    if not picked:
        have = ", ".join(f.short for f in _flavors_of(files)) or "none"
        raise NoProfileError(
            f"no Sia profile for model {model!r} on {fl.short}; measured flavors: {have}"
        )
    placement: list[str] = []
    bsz: list[int] = []
    step: list[float] = []
    sync: list[float] = []
    sources: list[str] = []
    for _suffix, f in picked:
        src = f"{model}/{f.name}"
        sources.append(src)
        _read_rows(f, src, placement, bsz, step, sync)
    return SiaProfile(model, fl, tuple(sources), tuple(placement), tuple(bsz), tuple(step),
                      tuple(sync))


_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")


def _read_rows(
    f: Traversable, src: str, placement: list[str], bsz: list[int], step: list[float],
    sync: list[float],
) -> None:
    """Append the rows of one placements file, reading columns by header name."""
    reader = csv.DictReader(f.read_text().splitlines())
    missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceFormatError(src, 1, missing[0], "missing column")
    for line, row in enumerate(reader, start=2):
        try:
            p = row["placement"].strip()
            if not p.isdigit():
                raise ValueError(f"placement {p!r} is not a digit string")
            b = int(row["local_bsz"])
            st, sy = float(row["step_time"]), float(row["sync_time"])
        except (ValueError, TypeError) as e:
            raise TraceFormatError(src, line, None, str(e)) from None
        placement.append(p)
        bsz.append(b)
        step.append(st)
        sync.append(sy)
