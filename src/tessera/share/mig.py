"""MIG rules: which GPU-instance layouts a GPU accepts, and in what order to create them.

Multi-Instance GPU (MIG) cuts one A100/H100/H200 into up to seven isolated *GPU instances*
(GIs). Think of the GPU as a shelf eight memory slices wide: a GI of a given *kind* is a box
that covers a run of memory slices (``1g`` one, ``2g`` two, ``3g`` and ``4g`` four, ``7g`` all
eight) and may only be put down at certain *start* positions. A ``3g`` may stand at 0 or 4, a
``2g`` at 0, 2 or 4, a ``1g`` anywhere from 0 to 6. Compute slices (seven, not eight) ride along
with the memory: a GI at start ``s`` with ``c`` compute slices uses compute ``[s, s + c)``.

A *layout* is a list of ``kind@start`` placements, and it is legal when

- R1: every start is one the kind allows;
- R2: the memory intervals ``[start, start + memory_slices)`` do not overlap;
- R3: at most one ``+me`` (media-extension) instance is present;
- R4: on drivers before R510, a ``4g`` and a ``3g`` are not combined.

The four supported GPUs share one lattice (same kinds, starts and NVML profile IDs); they differ
in SM counts and memory per slice, which is why performance must be profiled per GPU. The tables
come from NVIDIA's MIG User Guide and ``nvidia-smi`` transcripts, bundled as
``tessera/data/mig/mig_profiles.json``.

Every legal layout can be enumerated (297 over the basic kinds 1g/2g/3g/4g/7g, 19 of them
*maximal*, i.e. nothing else fits; 18 on pre-R510 drivers). Creating a layout on a real GPU uses
explicit placements, largest instance first, because the driver may refuse other orders.

>>> gpu = mig_gpu("A100-80GB")
>>> str(parse_layout(gpu, "3g@4 2g@0 1g@2 1g@3"))
'2g@0 1g@2 1g@3 3g@4'
>>> len(enumerate_layouts(gpu))
19
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import pairwise

from tessera.errors import SpecError, UnknownFlavorError
from tessera.model.gpus import GpuFlavor, resolve_flavor

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
BASE_KINDS: tuple[str, ...] = ("1g", "2g", "3g", "4g", "7g")
"""The basic profiles: one compute and memory size each. ``1g.2m`` and ``1g+me`` are extras."""
DOUBLE_MEMORY_KINDS: tuple[str, ...] = ("1g", "1g.2m", "2g", "3g", "4g", "7g")


class MigLayoutError(SpecError):
    """A MIG layout the hardware forbids, or a MIG profile / GPU that does not exist."""


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model (a row of ``nvidia-smi mig -lgip``)."""

    kind: str
    name: str
    gi_profile_id: int
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]
    max_instances: int
    sm_count: int
    memory_gib: float

    @property
    def media_extensions(self) -> bool:
        return self.kind.endswith("+me")


@dataclass(frozen=True, slots=True)
class MigGpu:
    """The MIG lattice of one GPU model: its profiles, keyed by kind (``3g``) or name."""

    gpu: str
    total_sms: int
    profiles: tuple[MigProfile, ...]
    flavor: GpuFlavor
    """The catalog flavor of :attr:`gpu` (resolved when the bundled lattices load)."""

    def profile(self, kind_or_name: str) -> MigProfile:
        for p in self.profiles:
            if kind_or_name in (p.kind, p.name):
                return p
        known = ", ".join(f"{p.kind} ({p.name})" for p in self.profiles)
        raise MigLayoutError(f"unknown MIG profile {kind_or_name!r} on {self.gpu}; known: {known}")


@dataclass(frozen=True, slots=True, order=True)
class Placement:
    """One GPU instance: its kind and its first memory slice (NVML ``placement.start``)."""

    start: int
    kind: str

    def __str__(self) -> str:
        return f"{self.kind}@{self.start}"


@dataclass(frozen=True, slots=True)
class Layout:
    """A legal set of placements on one GPU, sorted by start. Build it with :func:`check_layout`."""

    gpu: str
    placements: tuple[Placement, ...]

    def __str__(self) -> str:
        return " ".join(str(p) for p in self.placements)

    def kinds(self) -> tuple[str, ...]:
        return tuple(p.kind for p in self.placements)

    def multiset(self) -> str:
        """Canonical multiset text, largest kind first: ``3gx1 2gx1 1gx2`` (as in the tables)."""
        order = {k: i for i, k in enumerate(("7g", "4g", "3g", "2g", "1g", "1g+me", "1g.2m"))}
        counts: dict[str, int] = {}
        for p in self.placements:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        return " ".join(f"{k}x{n}" for k, n in sorted(counts.items(), key=lambda kv: order[kv[0]]))


@cache
def _lattice() -> dict[str, MigGpu]:
    text = resources.files("tessera.data").joinpath("mig/mig_profiles.json").read_text()
    raw = json.loads(text)
    out: dict[str, MigGpu] = {}
    for gpu_name, spec in raw["gpus"].items():
        profiles = tuple(
            MigProfile(
                kind=p["kind"],
                name=p["name"],
                gi_profile_id=int(p["nvml_gi_profile_id"]),
                compute_slices=int(p["compute_slices"]),
                memory_slices=int(p["memory_slices"]),
                starts=tuple(int(s) for s in p["starts"]),
                max_instances=int(p["max_instances"]),
                sm_count=int(p["sm_count_observed"]),
                memory_gib=float(p["memory_gib_observed"]),
            )
            for p in spec["profiles"]
        )
        out[gpu_name] = MigGpu(gpu_name, int(spec["total_sms_no_mig"]), profiles,
                               resolve_flavor(gpu_name))
    return out


def supported_gpus() -> tuple[str, ...]:
    return tuple(_lattice())


def mig_gpu(name: str) -> MigGpu:
    """The MIG lattice for a GPU name or alias (``a100-80gb``, ``NVIDIA-H100-80GB-HBM3`` ...)."""
    lattice = _lattice()
    try:
        short = resolve_flavor(name).short
    except UnknownFlavorError as e:
        raise MigLayoutError(f"unknown GPU {name!r}; MIG GPUs: {', '.join(lattice)}") from e
    if short not in lattice:
        raise MigLayoutError(
            f"GPU {short} has no MIG support in Tessera; MIG GPUs: {', '.join(lattice)}"
        )
    return lattice[short]


def layout_problem(
    gpu: MigGpu, placements: tuple[Placement, ...], *, r510: bool = True
) -> str | None:
    """Why a set of placements is illegal (rules R1-R4), or ``None`` when it is legal."""
    used: list[tuple[int, int, Placement]] = []
    me = 0
    kinds = set()
    for pl in placements:
        prof = gpu.profile(pl.kind)
        if pl.start not in prof.starts:
            return f"{pl}: {prof.kind} may start only at {', '.join(map(str, prof.starts))}"
        used.append((pl.start, pl.start + prof.memory_slices, pl))
        me += prof.media_extensions
        kinds.add(prof.kind)
    used.sort(key=lambda t: (t[0], t[1]))
    for (_, end_a, a), (start_b, _, b) in pairwise(used):
        if start_b < end_a:
            return f"{a} and {b} overlap on memory slices"
    if me > 1:
        return "at most one +me (media extensions) instance per GPU"
    if not r510 and "4g" in kinds and "3g" in kinds:
        return "4g together with 3g needs driver R510 or newer"
    return None


def check_layout(
    gpu: MigGpu, placements: tuple[Placement, ...] | list[Placement], *, r510: bool = True
) -> Layout:
    """Validate placements against R1-R4 and return them as a sorted :class:`Layout`."""
    pls = tuple(sorted(placements))
    problem = layout_problem(gpu, pls, r510=r510)
    if problem is not None:
        layout_text = " ".join(str(p) for p in pls)
        raise MigLayoutError(f"illegal MIG layout {layout_text!r} on {gpu.gpu}: {problem}")
    return Layout(gpu.gpu, pls)


def is_legal(gpu: MigGpu, placements: tuple[Placement, ...], *, r510: bool = True) -> bool:
    return layout_problem(gpu, tuple(placements), r510=r510) is None


def parse_layout(gpu: MigGpu, text: str, *, r510: bool = True) -> Layout:
    """Parse ``"3g@4 2g@0 1g@2"`` (kinds or profile names) and validate it."""
    placements = []
    for token in text.replace(",", " ").split():
        kind, sep, start = token.partition("@")
        if not sep or not start.isdigit():
            raise MigLayoutError(f"bad placement {token!r}: expected kind@start, e.g. 3g@4")
        placements.append(Placement(int(start), gpu.profile(kind).kind))
    return check_layout(gpu, placements, r510=r510)


def _candidates(gpu: MigGpu, kinds: tuple[str, ...]) -> tuple[Placement, ...]:
    return tuple(sorted(Placement(s, k) for k in kinds for s in gpu.profile(k).starts))


@cache
def _legal_sets(
    gpu_name: str, kinds: tuple[str, ...], r510: bool
) -> tuple[tuple[Placement, ...], ...]:
    gpu = _lattice()[gpu_name]
    cands = _candidates(gpu, kinds)
    found: list[tuple[Placement, ...]] = []

    def grow(chosen: tuple[Placement, ...], index: int) -> None:
        found.append(chosen)
        for j in range(index, len(cands)):
            nxt = (*chosen, cands[j])
            if is_legal(gpu, nxt, r510=r510):
                grow(nxt, j + 1)

    grow((), 0)
    return tuple(found)


def enumerate_layouts(
    gpu: MigGpu,
    kinds: tuple[str, ...] = BASE_KINDS,
    *,
    maximal_only: bool = True,
    r510: bool = True,
    include_empty: bool = False,
) -> tuple[Layout, ...]:
    """Every legal layout built from ``kinds``; by default only the maximal ones.

    A layout is maximal when no placement of any of ``kinds`` can be added to it.
    """
    for k in kinds:
        gpu.profile(k)
    sets = _legal_sets(gpu.gpu, tuple(sorted(kinds)), r510)
    cands = _candidates(gpu, kinds)
    out = []
    for pls in sets:
        if not pls and not include_empty:
            continue
        if maximal_only and any(
            c not in pls and is_legal(gpu, (*pls, c), r510=r510) for c in cands
        ):
            continue
        out.append(Layout(gpu.gpu, tuple(sorted(pls))))
    return tuple(out)


def free_placements(gpu: MigGpu, layout: Layout, kind: str, *, r510: bool = True) -> list[int]:
    """Starts at which one more GI of ``kind`` could be added to ``layout``."""
    prof = gpu.profile(kind)
    return [
        s
        for s in prof.starts
        if is_legal(gpu, (*layout.placements, Placement(s, prof.kind)), r510=r510)
    ]


@dataclass(frozen=True, slots=True)
class CreateStep:
    """One ``nvmlDeviceCreateGpuInstanceWithPlacement`` call: profile ID and start slice."""

    gi_profile_id: int
    profile_name: str
    start: int


def creation_order(gpu: MigGpu, layout: Layout) -> tuple[CreateStep, ...]:
    """The order to create a layout's GIs: explicit placements, largest memory span first.

    The driver can reject small-before-large orders (the guide's ``-cgi 19,19,14,9`` fails);
    with explicit placements and the largest instances first, every step lands in a free,
    legal slot, so each prefix of the sequence is itself a legal layout.
    """
    ordered = sorted(
        layout.placements, key=lambda p: (-gpu.profile(p.kind).memory_slices, p.start)
    )
    return tuple(
        CreateStep(gpu.profile(p.kind).gi_profile_id, gpu.profile(p.kind).name, p.start)
        for p in ordered
    )
