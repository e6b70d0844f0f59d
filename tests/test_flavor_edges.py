"""A flavor name is resolved where it enters Tessera, and only there.

``resolve_flavor``/``resolve_flavors`` turn a name into a catalog :class:`GpuFlavor`. Below the
edge -- readers, cluster files, the request, the store, the CLI, built-in data tables -- code
holds flavors (placements, rankings, free-GPU books, rates), so a call anywhere else means a
string travelled past the edge. ``EDGES`` lists the modules where names enter; the test fails
on a new module that resolves names, and on an entry that no longer does (so the list stays
exact).
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tessera"

#: Modules where a name enters: trace readers, cluster descriptions, the job request and the
#: store, the CLI's arguments, a device's own name, and the tables of names that come with
#: bundled data (resolved once, at import).
EDGES = frozenset({
    "cli/zeus.py",                # --gpu (a catalog name or one of Zeus's four trace GPUs)
    "live/inference/nvml.py",     # the name NVML reports for a device
    "model/topology.py",          # the lingjun-847 preset's documented GPU
    "cli/share.py",               # the services file's gpu:
    "cli/simulate.py",            # --flavors
    "live/jobcodec.py",           # the store's rows
    "live/kueue_read.py",         # Kueue's ResourceFlavor objects (nvidia.com/gpu.product)
    "live/progress.py",           # the store's kept progress estimates (flavor by short name)
    "live/step_fits.py",          # the store's kept step-time fits (flavor by short name)
    "live/metrics.py",            # the store's job rows read by SQL for a scrape (label values)
    "live/tenancy_yaml.py",       # the tenancy file's flavors: keys
    "live/jobcodec_v1.py",        # the store's rows of the first format
    "live/records.py",            # the store's allocation and job rows (flavor columns)
    "live/request.py",            # the API's and YAML's flavors
    "live/spec.py",               # the request → the core's JobSpec
    "model/cluster.py",           # cluster files, compact strings, trace machine lists, presets
    "model/jobs.py",              # JobSpec accepts names at construction (readers, tests)
    "perf/estimate.py",           # the throughput table's columns, labelled by short name as
                                  # perf/profiles.py keys them; roofline columns by name
    "perf/goodput.py",            # a docstring example
    "perf/kernel_prior.py",       # the throughput table's columns by short name, as estimate.py
    "perf/profiles.py",           # Gavel's worker names in its throughput file
    "perf/roofline.py",           # published measurements, chip twins
    "perf/sia.py",                # Sia's file suffixes
    "perf/step_book.py",          # a docstring example
    "perf/sia_table.py",          # the table's reference flavor and twins
    "perf/steptime.py",           # same-silicon twins
    "plan/devices.py",            # --devices A100:4,T4:4
    "sched/gavel/compat_mechanism.py",    # Gavel's worker type names
    "share/mig.py",               # the bundled MIG lattices' GPU names, and the name a user,
                                  # services file or profile table gives mig_gpu()
    "train/devices.py",           # the name torch reports for a device
    "workload/readers/fgd.py",    # gpu_spec
})

_CALL = re.compile(r"\bresolve_flavors?\(")


def _resolving_modules() -> set[str]:
    out = set()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel != "model/gpus.py" and _CALL.search(path.read_text()):
            out.add(rel)
    return out


def test_names_are_resolved_only_at_edges() -> None:
    found = _resolving_modules()
    new = sorted(found - EDGES)
    assert not new, ("these modules resolve flavor names below the edge; take a GpuFlavor "
                     f"instead (or, for a real edge, add it to EDGES): {new}")


def test_the_lists_stay_exact() -> None:
    found = _resolving_modules()
    gone = sorted(EDGES - found)
    assert not gone, f"no longer resolve names: remove them from EDGES: {gone}"


#: A flavor annotated as a name: ``flavor: str``, ``flavors: Sequence[str]``, ``str | GpuFlavor``.
_NAME_TYPED = re.compile(r"\bflavor(s|_short)?: (str\b|(Sequence|list|tuple)\[str\b)"
                         r"|str \| GpuFlavor|GpuFlavor \| str")

#: Modules below the edge whose ``flavor: str`` is a throughput table's column label in a
#: report row (the table keys flavors by short name, perf/profiles.py), never a flavor that
#: code decides with.
LABELS = frozenset({"perf/speed_eval.py", "perf/speed_bound.py"})

#: Packages below the edge: they take and hold flavors only.
_BELOW = ("sched/", "sim/", "live/", "plan/", "perf/", "share/")


def test_no_flavor_is_typed_as_a_name_below_the_edge() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(_BELOW) and rel not in EDGES | LABELS:
            found += [f"{rel}:{n}: {line.strip()}"
                      for n, line in enumerate(path.read_text().splitlines(), 1)
                      if _NAME_TYPED.search(line)]
    assert not found, "a flavor below the edge is a GpuFlavor, not a name:\n" + "\n".join(found)
