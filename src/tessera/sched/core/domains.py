"""Gang placement on a cluster with topology domains (NVLink domains and switches).

When some node names an NVLink domain or a switch path (:mod:`tessera.model.topology`), the
cluster's :class:`~tessera.sched.core.free_view.Layout` carries a :class:`DomainMap` and
:meth:`~tessera.sched.core.placement.FreeGpus.find` asks :func:`choose` instead of its buckets.
A cluster without domains never comes here (its layout has no map), so its placements and their
cost are exactly what they were.

The rules, in order:

1. **One node, best fit, away from intact domains.** A gang one node can hold goes to the node
   with the fewest free GPUs that still holds it (best fit, as everywhere); among equally good
   nodes, to the one whose smallest domain has the fewest free GPUs, so small jobs fill domains
   that are already broken and leave whole NVLink domains (and ToRs) to the gangs that need
   them. Without this a 1-GPU job lands wherever the free-count buckets put it, and a handful
   of them can break every domain.
2. **The smallest domain that holds it.** Otherwise the gang goes to one NVLink domain (best
   fit: the domain with the fewest free GPUs that holds it), its GPUs talking at NVLink speed
   although they sit on several servers. A gang inside its locality wait (``locality_wait_s``,
   see :func:`~tessera.sched.core.options.needs_locality`) accepts only steps 1 and 2: it waits
   at most that long for them.
3. **Then one ToR, one aggregation switch, one core switch, one rack, anywhere**, each the
   best-fitting group that holds the gang, its nodes with most free GPUs first.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tessera.model.nodes import Node
from tessera.sched.core.count_index import CountIndex
from tessera.sched.core.getters import counts_of

__all__ = ["DomainMap", "choose"]


@dataclass(frozen=True, slots=True)
class DomainMap:
    """Each node's domain at every level, smallest level first.

    Attributes:
        levels: per level (NVLink domain, ToR, aggregation, core, rack), node id -> the name of
            its domain at that level; a node absent from a level has no domain there.
        smallest: node id -> the name of its smallest domain (NVLink if it has one, else its
            ToR, ...), which step 1 keeps small jobs inside; absent for a node with none.
    """

    levels: tuple[Mapping[str, str], ...]
    smallest: Mapping[str, str]
    members: Mapping[str, tuple[str, ...]]
    """Each smallest domain's nodes (of every flavor)."""
    _groups: dict[tuple[int, int], tuple[tuple[str, ...], tuple[_Group, ...]]] = field(
        default_factory=dict, compare=False, repr=False)
    """Per (node tuple, level): :meth:`groups` (filled as searches ask)."""

    def groups(self, nodes: tuple[str, ...], level: int) -> tuple[_Group, ...]:
        """The domains of ``level`` among ``nodes`` (a layout's tuple of one flavor's nodes),
        each as the positions of its members in ``nodes``, ascending, with a getter that reads
        their counts; in the order of their first member. Computed once per tuple and level."""
        key = (id(nodes), level)
        hit = self._groups.get(key)
        if hit is None or hit[0] is not nodes:
            names = self.levels[level]
            by: dict[str, list[int]] = {}
            for i, n in enumerate(nodes):
                d = names.get(n)
                if d is not None:
                    by.setdefault(d, []).append(i)
            hit = (nodes, tuple(_Group(tuple(ix), _getter(ix)) for ix in by.values()))
            self._groups[key] = hit
        return hit[1]

    @classmethod
    def of(cls, nodes: Sequence[Node]) -> DomainMap | None:
        """The map of ``nodes``; ``None`` when no node names an NVLink domain or a switch."""
        if not any(n.nvlink_domain is not None or n.switch_path for n in nodes):
            return None
        levels: list[dict[str, str]] = [
            {n.node_id: f"nvl:{n.nvlink_domain}" for n in nodes if n.nvlink_domain is not None}
        ]
        for i in range(3):
            # (a level's name carries the path above it: two ToRs named alike under different
            # aggregation switches are different ToRs)
            levels.append({n.node_id: "/".join(n.switch_path[i:])
                           for n in nodes if len(n.switch_path) > i})
        levels.append({n.node_id: f"rack:{n.rack}" for n in nodes})
        smallest: dict[str, str] = {}
        for level in levels[:-1]:
            for node_id, name in level.items():
                smallest.setdefault(node_id, name)
        members: dict[str, list[str]] = {}
        for node_id, name in smallest.items():
            members.setdefault(name, []).append(node_id)
        return cls(tuple(levels), smallest, {d: tuple(ns) for d, ns in members.items()})


@dataclass(frozen=True, slots=True)
class _Group:
    """One domain's members among a flavor's nodes: their positions, and a getter of their
    counts from the flavor's count tuple (always a tuple, even for one member)."""

    positions: tuple[int, ...]
    counts: Callable[[Sequence[int]], tuple[int, ...]]


def _getter(positions: list[int]) -> Callable[[Sequence[int]], tuple[int, ...]]:
    if len(positions) == 1:
        only = positions[0]
        return lambda counts: (counts[only],)
    return operator.itemgetter(*positions)


def choose(
    nodes: tuple[str, ...],
    by_count: CountIndex,
    free: Mapping[str, int],
    gpus: int,
    require_local: bool,
    domains: DomainMap,
) -> tuple[tuple[str, int], ...] | None:
    """``((node_id, gpus), ...)`` for a gang of ``gpus`` over ``nodes`` (one flavor's, in
    layout order) by the rules of the module docstring; ``None`` when it cannot be placed.

    Args:
        nodes: a layout's tuple (its domain groups are kept per tuple, see
            :meth:`DomainMap.groups`).
        by_count: ``nodes`` by their free GPUs now
            (:class:`~tessera.sched.core.count_index.CountIndex`).
        free: free GPUs per node now (every node of the cluster that is up).
        require_local: the gang must sit on one node or inside one NVLink domain.
    """
    best_free = by_count.first_at_least(gpus)
    if best_free:
        ties = by_count.at[best_free]  # (layout order)
        if len(ties) == 1:
            return ((nodes[ties[0]], gpus),)
        smallest, members = domains.smallest, domains.members
        best: tuple[int, int] | None = None
        seen: set[str] = set()
        for i in ties:  # (the first tie of each domain: ties come in layout order)
            d = smallest.get(nodes[i])
            if d is None:
                return ((nodes[i], gpus),)
            if d in seen:
                continue
            seen.add(d)
            s = sum(counts_of(free, members[d]))
            if best is None or s < best[0]:
                best = (s, i)
        assert best is not None
        return ((nodes[best[1]], gpus),)
    counts = counts_of(free, nodes)
    # Each level's best-fitting group: the fewest free GPUs that hold the gang, the group
    # whose first node with a free GPU comes first on a tie. Groups are precomputed per level
    # (:meth:`DomainMap.groups`); only their sums are read here, in C.
    for level in range(1 if require_local else len(domains.levels)):
        best_group: tuple[int, int, tuple[int, ...]] | None = None
        for g in domains.groups(nodes, level):
            s = sum(g.counts(counts))
            if s < gpus or (best_group is not None and s > best_group[0]):
                continue
            lead = next((i for i in g.positions if counts[i] > 0), None)
            if lead is None:  # (no node of the group has a free GPU: not a candidate)
                continue
            if best_group is None or (s, lead) < best_group[:2]:
                best_group = (s, lead, g.positions)
        if best_group is not None:
            return _fill([(nodes[i], counts[i]) for i in best_group[2] if counts[i] > 0], gpus)
    if require_local or sum(counts) < gpus:
        return None
    return _fill([(n, f) for n, f in zip(nodes, counts, strict=True) if f > 0], gpus)


def _fill(group: list[tuple[str, int]], gpus: int) -> tuple[tuple[str, int], ...]:
    """Take ``gpus`` from ``group`` (which holds them), nodes with most free GPUs first."""
    taken: list[tuple[str, int]] = []
    need = gpus
    for n, f in sorted(group, key=lambda nf: -nf[1]):
        c = min(f, need)
        taken.append((n, c))
        need -= c
        if need == 0:
            break
    return tuple(taken)
