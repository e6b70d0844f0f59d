"""Where a job runs (or ran), said so that nobody has to guess.

The core's :meth:`~tessera.sched.core.snapshot.Placement.describe` writes a gang's nodes as
``node:count`` (``2×V100-16GB on v100-16gb-0000:2``), which a reader takes for a GPU index as
often as for a count. What the live service shows -- the CLI, the API and the dashboard --
says the count in words: ``2×V100-16GB: 2 GPUs on node v100-16gb-0000``. The API also gives
the parts as numbers (:func:`placement_json`), so scripts need not parse either text.
"""

from __future__ import annotations

from typing import Any

from tessera.sched.core.snapshot import Placement


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def describe(p: Placement) -> str:
    """``2×V100-16GB: 2 GPUs on node a``; ``4×T4: 2 GPUs on node a + 2 GPUs on node b``; a
    mixed gang names each node's flavor; a shared GPU set names its partner jobs; a CPU-only
    job's ``CPU-only: 16 CPUs, 64 GiB on node a``."""
    if p.num_gpus == 0:  # a CPU-only job: what it holds, no GPUs
        return "CPU-only: " + " + ".join(f"{c:g} CPUs, {m:g} GiB on node {n}"
                                         for n, c, m in p.host_by_node)
    nodes = " + ".join(f"{_gpus(count)}{f' {flavor}' if p.is_mixed else ''} on node {node}"
                       for node, count, flavor in p.parts())
    shared = (" (shared with " + ", ".join(str(j) for j in p.colocated_with) + ")"
              if p.colocated_with else "")
    if p.is_mixed:
        mix = ", ".join(f"{c}×{f}" for f, c in p.flavor_counts())
        return f"{_gpus(p.num_gpus)} mixed ({mix}): {nodes}{shared}"
    return f"{p.num_gpus}×{p.flavor}: {nodes}{shared}"


def placement_json(p: Placement, run: int, status: str) -> dict[str, Any]:
    """A run's placement as numbers: ``{"run", "status", "held", "text", "nodes": [{"node_id",
    "gpu_count", "flavor"}]}``; ``held``: whether the run still holds its GPUs (planned,
    running or stopping), ``False`` once it ended."""
    return {"run": run, "status": status, "held": status != "done", "text": describe(p),
            "nodes": [{"node_id": node, "gpu_count": count, "flavor": flavor.short}
                      for node, count, flavor in p.parts()]}
