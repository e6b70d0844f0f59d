"""Where Synergy puts a new gang's GPUs: on a node where its CPUs and memory fit.

The core places GPUs counting GPUs only (best fit: the node with the fewest free GPUs that
holds the gang). Synergy's GREEDY and TUNE (``allocate_synergy_placement`` in its
``resources/cluster.py``; read, not copied) place by the job's whole demand vector instead:
the servers with enough free GPUs are tried fewest free GPUs first, and the job goes to the
first whose free CPUs and memory hold its demand (TUNE then tries its fair share the same way
before it takes anything back). So a CPU-hungry job skips a node whose CPUs are taken and
lands on one that still has them, where the core's choice would have starved it.

:func:`repick` makes that choice for a one-node gang the round starts (a gang spread over
nodes keeps the core's placement); the modes call it with their own "fits" rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from tessera.model.jobs import JobId
from tessera.sched.core.snapshot import Placement, Snapshot

Host = tuple[tuple[str, float, float], ...]


def gpus_free_after(snapshot: Snapshot, placements: Mapping[JobId, Placement]) -> dict[str, int]:
    """``node_id -> GPUs`` no gang of ``placements`` holds, on every up node."""
    free = {n.node_id: n.gpus for n in snapshot.up_nodes()}
    for p in placements.values():
        for node_id, g in p.gpus_by_node:
            if node_id in free:
                free[node_id] -= g
    return free


def repick(p: Placement, snapshot: Snapshot, free_gpus: dict[str, int],
           fits: Callable[[Placement], bool]) -> Placement | None:
    """``p`` moved to the first node (fewest free GPUs first, counting ``p``'s own as free;
    then layout order) with room for its GPUs of its flavor where ``fits`` holds, and
    ``free_gpus`` updated; ``None`` when no node fits (``p`` stays where it was). A gang on
    several nodes, or of several flavors, is never moved (returned as it is when it fits)."""
    if not p.consolidated or p.is_mixed:
        return p if fits(p) else None
    (cur, g), = p.gpus_by_node
    flavor = p.flavor
    order = []
    for k, node in enumerate(snapshot.up_nodes()):
        room = free_gpus.get(node.node_id, 0) + (g if node.node_id == cur else 0)
        if room >= g and node.flavor == flavor:
            order.append((room, k, node.node_id))
    for _room, _k, node_id in sorted(order):
        q = p if node_id == cur else replace(p, gpus_by_node=((node_id, g),), host_by_node=())
        if fits(q):
            if node_id != cur:
                free_gpus[cur] = free_gpus.get(cur, 0) + g
                free_gpus[node_id] -= g
            return q
    return None
