"""Gang placement: turning "job j runs on flavor f" into GPUs on concrete nodes.

Rules, in order:

1. **All or nothing.** A gang gets every GPU it asks for in one step, or none.
2. **Consolidate.** Prefer one node; among nodes that fit, take the *best fit* (the one with
   the fewest free GPUs that still fits), which keeps large free blocks for large gangs.
   Nodes are kept in buckets by free-GPU count, so finding the best fit costs O(GPUs per
   node), not O(nodes).
3. **Then one rack, then anywhere** -- unless the job requires locality. A gang split across
   nodes runs at the profiles' *unconsolidated* speed (``perf`` decides how much slower).
4. **Never over-allocate.** :class:`FreeGpus` is the only bookkeeper and refuses to go below 0.

``FreeGpus`` is a scratch structure owned by one decision round; the snapshot stays immutable.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from tessera.model.cluster import Node
from tessera.sched.snapshot import Placement


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """Free capacity of one flavor: total free GPUs and the largest free block on one node."""

    total_free: int
    largest_block: int


class FreeGpus:
    """Free GPU counts per node, grouped by flavor.

    Args:
        nodes: the nodes that are up.
        free: free GPUs per node if the caller already knows them (copied, never mutated);
            otherwise every node starts fully free.
    """

    def __init__(self, nodes: tuple[Node, ...], free: Mapping[str, int] | None = None) -> None:
        self._free: dict[str, int] = {}
        self._rack: dict[str, str] = {}
        self._flavor: dict[str, str] = {}
        self._by_flavor: dict[str, list[str]] = defaultdict(list)
        self._total: dict[str, int] = defaultdict(int)
        self._size: dict[str, int] = {}
        # flavor -> free count -> nodes with exactly that many free GPUs (insertion-ordered);
        # built on first use of a flavor, so a round that touches one flavor pays for one.
        self._buckets: dict[str, list[dict[str, None]]] = {}
        for n in nodes:
            f = n.flavor.short
            k = n.gpus if free is None else free.get(n.node_id, n.gpus)
            self._free[n.node_id] = k
            self._rack[n.node_id] = n.rack
            self._flavor[n.node_id] = f
            self._by_flavor[f].append(n.node_id)
            self._total[f] += k
            self._size[f] = max(self._size.get(f, 0), n.gpus)

    def _bucketed(self, flavor: str) -> list[dict[str, None]]:
        buckets = self._buckets.get(flavor)
        if buckets is None:
            buckets = [{} for _ in range(self._size.get(flavor, 0) + 1)]
            for i in self._by_flavor.get(flavor, ()):
                buckets[self._free[i]][i] = None
            self._buckets[flavor] = buckets
        return buckets

    def flavors(self) -> tuple[str, ...]:
        return tuple(self._by_flavor)

    def total_free(self, flavor: str) -> int:
        return self._total.get(flavor, 0)

    def info(self, flavor: str) -> BlockInfo:
        buckets = self._bucketed(flavor)
        largest = next((k for k in range(len(buckets) - 1, 0, -1) if buckets[k]), 0)
        return BlockInfo(self._total.get(flavor, 0), largest)

    def _move(self, node_id: str, delta: int) -> None:
        old = self._free[node_id]
        buckets = self._buckets.get(self._flavor[node_id])
        if buckets is not None:
            del buckets[old][node_id]
            buckets[old + delta][node_id] = None
        self._free[node_id] = old + delta

    def take(self, placement: Placement) -> None:
        """Reserve a placement's GPUs; raises if that would over-allocate any node."""
        for node_id, count in placement.gpus_by_node:
            if self._free.get(node_id, 0) < count:
                raise ValueError(f"over-allocation of {node_id} by {placement.describe()}")
        for node_id, count in placement.gpus_by_node:
            self._move(node_id, -count)
        self._total[placement.flavor] -= placement.num_gpus

    def release(self, placement: Placement) -> None:
        """Give a placement's GPUs back (a preemption being considered)."""
        for node_id, count in placement.gpus_by_node:
            self._move(node_id, count)
        self._total[placement.flavor] += placement.num_gpus

    def can_take(self, placement: Placement) -> bool:
        return all(self._free.get(n, 0) >= c for n, c in placement.gpus_by_node)

    def find(self, flavor: str, gpus: int, require_locality: bool) -> Placement | None:
        """Choose GPUs for a gang without reserving them; ``None`` if it cannot fit."""
        if gpus > self._total.get(flavor, 0):
            return None
        buckets = self._bucketed(flavor)
        for k in range(gpus, len(buckets)):
            if buckets[k]:
                return Placement(flavor, ((next(iter(buckets[k])), gpus),))
        if require_locality:
            return None
        return self._spread(flavor, gpus, self._by_flavor[flavor])

    def _spread(self, flavor: str, gpus: int, nodes: list[str]) -> Placement | None:
        by_rack: dict[str, list[str]] = defaultdict(list)
        for n in nodes:
            if self._free[n] > 0:
                by_rack[self._rack[n]].append(n)
        # One rack if any rack can hold the gang (fewest nodes first), else across racks.
        candidates = [ns for ns in by_rack.values() if sum(self._free[n] for n in ns) >= gpus]
        pool = (
            min(candidates, key=lambda ns: sum(self._free[n] for n in ns))
            if candidates
            else [n for ns in by_rack.values() for n in ns]
        )
        pool = sorted(pool, key=lambda n: -self._free[n])
        taken: list[tuple[str, int]] = []
        need = gpus
        for n in pool:
            c = min(self._free[n], need)
            taken.append((n, c))
            need -= c
            if need == 0:
                return Placement(flavor, tuple(taken))
        return None
