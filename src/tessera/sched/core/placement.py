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
A round starts either from per-node counts (it then builds a flavor's buckets when it first
needs them) or from a driver's :class:`~tessera.sched.core.free_book.FreeBook`, whose buckets are
kept up to date between rounds (it then builds nothing; see :class:`FreeGpus`).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tessera.model.cluster import Node
from tessera.model.gpus import GpuFlavor
from tessera.sched.core.free_book import FreeBook, FreeCounts
from tessera.sched.core.snapshot import Placement, Snapshot


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """Free capacity of one flavor: total free GPUs and the largest free block on one node."""

    total_free: int
    largest_block: int


@dataclass(frozen=True, slots=True)
class Layout:
    """The static shape of a set of nodes, computed once per cluster."""

    capacity: Mapping[str, int]
    flavor: Mapping[str, GpuFlavor]
    rack: Mapping[str, str]
    by_flavor: Mapping[GpuFlavor, tuple[str, ...]]
    size: Mapping[GpuFlavor, int]
    position: Mapping[str, int]
    """Each node's index in its flavor's ``by_flavor`` tuple."""

    @classmethod
    def of(cls, nodes: tuple[Node, ...]) -> Layout:
        by_flavor: dict[GpuFlavor, list[str]] = defaultdict(list)
        size: dict[GpuFlavor, int] = {}
        position: dict[str, int] = {}
        for n in nodes:
            f = n.flavor
            position[n.node_id] = len(by_flavor[f])
            by_flavor[f].append(n.node_id)
            size[f] = max(size.get(f, 0), n.gpus)
        return cls(
            capacity={n.node_id: n.gpus for n in nodes},
            flavor={n.node_id: n.flavor for n in nodes},
            rack={n.node_id: n.rack for n in nodes},
            by_flavor={f: tuple(ids) for f, ids in by_flavor.items()},
            size=size,
            position=position,
        )


_GETTERS: dict[int, tuple[tuple[str, ...], Callable[[Mapping[str, int]], Any]]] = {}


def _sum_over(free: Mapping[str, int], nodes: tuple[str, ...]) -> int:
    """``sum(free[n] for n in nodes)``, with the lookups done in C: a round sums every node
    of a flavor once, and clusters have hundreds of nodes. The getter is kept per node tuple
    (a layout's, which lives as long as its cluster; the table is emptied past 64 entries)."""
    if len(nodes) < 2:
        return free[nodes[0]] if nodes else 0
    hit = _GETTERS.get(id(nodes))
    if hit is None or hit[0] is not nodes:
        if len(_GETTERS) >= 64:
            _GETTERS.clear()
        hit = (nodes, operator.itemgetter(*nodes))
        _GETTERS[id(nodes)] = hit
    return sum(hit[1](free))


class _ChangedOver(dict[str, int]):
    """A round's free counts over a driver's book: holds the nodes the round changed and reads
    the rest from the book's own counts (which do not change while the round runs).

    Copying every node's count at the start of each round walked all 552 servers of the full
    Philly table at every event, although an event round changes one or two. Reads by key and
    ``get`` answer as a full copy would; the mapping is never iterated.
    """

    __slots__ = ("_base",)

    def __init__(self, base: Mapping[str, int]) -> None:
        super().__init__()
        self._base = base

    def __missing__(self, node_id: str) -> int:
        return self._base[node_id]

    def get(self, node_id: str, default: Any = None) -> Any:
        return super().get(node_id, self._base.get(node_id, default))


class FreeGpus:
    """Free GPU counts per node, grouped by flavor: one round's scratch copy.

    Best fit keeps the nodes of each flavor in *buckets* by free-GPU count. Which of two
    equally good nodes a gang gets depends on a bucket's order, so that order is part of every
    result: the flavor's nodes in layout order as they stood when the round first looked at
    the flavor, then the nodes the round changed since, in the order it last changed them.
    A round started from per-node counts builds a flavor's buckets at that first look (a walk
    over its nodes). A round started from a driver's :class:`~tessera.sched.core.free_book.FreeBook`
    (``base``) reads the book's sorted buckets instead and notes only the nodes it changes. The
    nodes it changed *before* its first look (a round-based round gives every running gang back
    first) are sorted by layout position at that look, per count, and merged with the book's
    buckets as they are read, so no round over a book walks a flavor's nodes. The order, and so
    every placement, is the same either way.

    Args:
        nodes: the nodes that are up.
        free: free GPUs per node if the caller already knows them (copied, never mutated);
            otherwise every node starts fully free.
        layout: the nodes' static layout, when the caller has it cached.
        base: a driver's book to start from instead (its layout and counts are used; the book
            must not change while this copy is in use).
    """

    def __init__(
        self,
        nodes: tuple[Node, ...],
        free: Mapping[str, int] | None = None,
        layout: Layout | None = None,
        base: FreeBook | None = None,
    ) -> None:
        lay = base.layout if base is not None else layout or Layout.of(nodes)
        self._layout = lay
        self._rack = lay.rack
        self._flavor = lay.flavor
        self._by_flavor = lay.by_flavor
        self._size = lay.size
        self._base = base
        self._total: dict[GpuFlavor, int]
        self._free: dict[str, int]
        if base is not None:
            self._free = _ChangedOver(base.live_counts())
            self._total = base.totals()
        else:
            if free is None:
                self._free = dict(lay.capacity)
            else:
                self._free = {n: free.get(n, c) for n, c in lay.capacity.items()} if len(
                    free) != len(lay.capacity) else dict(free)
            self._total = {}
        # flavor -> free count -> nodes with exactly that many free GPUs (insertion-ordered);
        # built on first use of a flavor, so a round that touches one flavor pays for one.
        self._buckets: dict[GpuFlavor, list[dict[str, None]]] = {}
        # Over a book: flavor -> nodes changed since the first look, in order of last change;
        # flavor -> nodes changed before the first look; and, from the first look on, those
        # nodes per count then, each bucket as (layout position, node) ascending.
        self._late: dict[GpuFlavor, dict[str, None]] = {}
        self._early: dict[GpuFlavor, dict[str, None]] = {}
        self._pre: dict[GpuFlavor, tuple[dict[str, None], list[list[tuple[int, str]]]]] = {}
        # Gangs given back and taken back again, not applied until the round next reads or
        # changes anything (see take_back); while only releases happened over a book in range,
        # taking back what was given back always fits.
        self._deferred: list[Placement] = []
        self._only_released = base is not None and base.in_range

    @classmethod
    def of_snapshot(cls, snapshot: Snapshot, layout: Layout | None = None) -> FreeGpus:
        """Free GPUs of a snapshot: the driver's counts when it keeps them, otherwise every
        up node's GPUs minus those the snapshot's running gangs hold.

        Counts from a driver's book start the round from the book itself when it describes
        these very nodes (``layout`` is the book's and every node is up); counts the driver
        has changed since the snapshot was taken are not trusted: the running gangs decide.

        Args:
            layout: the cluster's layout, when the caller has it cached (ignored while some
                nodes are down).
        """
        free = snapshot.free_gpus
        if isinstance(free, FreeCounts):
            book = free.current()
            if book is None:
                free = None
            elif book.layout is layout and not snapshot.down_nodes and book.in_range:
                return cls(snapshot.cluster.nodes, base=book)
        if free is None:
            used: dict[str, int] = {}
            for j in snapshot.jobs:
                if j.running and j.placement is not None:
                    for n, c in j.placement.gpus_by_node:
                        used[n] = used.get(n, 0) + c
            free = {n.node_id: n.gpus - used.get(n.node_id, 0) for n in snapshot.up_nodes()}
        if snapshot.down_nodes:
            return cls(snapshot.up_nodes(), free)
        return cls(snapshot.cluster.nodes, free, layout)

    def _look(self, flavor: GpuFlavor) -> list[dict[str, None]] | None:
        """The round's first look at ``flavor``: start noting changes over the book (returns
        ``None``), or build the flavor's buckets from the counts (returns them)."""
        if self._base is not None and flavor in self._by_flavor:
            self._late[flavor] = {}
            early = self._early.pop(flavor, None)
            if early:
                position = self._layout.position
                free = self._free
                pre: list[list[tuple[int, str]]] = [[] for _ in range(self._size[flavor] + 1)]
                for pos, n in sorted([(position[n], n) for n in early]):
                    pre[free[n]].append((pos, n))
                self._pre[flavor] = (early, pre)
            return None
        buckets: list[dict[str, None]] = [{} for _ in range(self._size.get(flavor, 0) + 1)]
        free = self._free
        for i in self._by_flavor.get(flavor, ()):
            buckets[free[i]][i] = None
        self._buckets[flavor] = buckets
        return buckets

    def _first(self, flavor: GpuFlavor, count: int) -> str | None:
        """The first node of ``flavor`` with exactly ``count`` free GPUs, in bucket order
        (see the class docstring); ``None`` if there is none."""
        late = self._late.get(flavor)
        if late is None:
            buckets = self._buckets.get(flavor)
            if buckets is None:
                buckets = self._look(flavor)
            if buckets is not None:
                bucket = buckets[count]
                return next(iter(bucket)) if bucket else None
            late = self._late[flavor]
        ids = self._by_flavor[flavor]
        assert self._base is not None
        positions = self._base.positions(flavor, count)
        pre = self._pre.get(flavor)
        if pre is None:
            for pos in positions:
                n = ids[pos]
                if n not in late:
                    return n
        else:
            # The layout-ordered part merges two sorted sources: the book's nodes the round
            # had not changed at its first look, and those it had (at their counts then);
            # either kind changed since is in ``late`` instead.
            early, pre_at = pre
            found: str | None = None
            found_pos = -1
            for pos, n in pre_at[count]:
                if n not in late:
                    found, found_pos = n, pos
                    break
            for pos in positions:
                if found is not None and pos > found_pos:
                    break
                n = ids[pos]
                if n not in late and n not in early:
                    return n
            if found is not None:
                return found
        if late:
            free = self._free
            for n in late:
                if free[n] == count:
                    return n
        return None

    def _note(self, node_id: str, old: int, new: int) -> None:
        """Move ``node_id`` from bucket ``old`` to bucket ``new`` (its count is the caller's)."""
        flavor = self._flavor[node_id]
        buckets = self._buckets.get(flavor)
        if buckets is not None:
            del buckets[old][node_id]
            buckets[new][node_id] = None
            return
        late = self._late.get(flavor)
        if late is not None:
            late.pop(node_id, None)
            late[node_id] = None
        elif self._base is not None:  # (without a book, every first look builds buckets)
            self._early.setdefault(flavor, {})[node_id] = None

    def flavors(self) -> tuple[GpuFlavor, ...]:
        return tuple(self._by_flavor)

    def total_free(self, flavor: GpuFlavor) -> int:
        if self._deferred:
            self._settle()
        t = self._total.get(flavor)
        if t is None:
            t = _sum_over(self._free, self._by_flavor.get(flavor, ()))
            self._total[flavor] = t
        return t

    def info(self, flavor: GpuFlavor) -> BlockInfo:
        if self._deferred:
            self._settle()
        first = self._first
        largest = next((k for k in range(self._size.get(flavor, 0), 0, -1)
                        if first(flavor, k) is not None), 0)
        return BlockInfo(self.total_free(flavor), largest)

    def _move(self, node_id: str, delta: int) -> None:
        old = self._free[node_id]
        self._note(node_id, old, old + delta)
        self._free[node_id] = old + delta

    def free_on(self, node_id: str) -> int:
        """Free GPUs on one node (0 for a node that is down or unknown)."""
        if self._deferred:
            self._settle()
        return self._free.get(node_id, 0)

    def capacity(self, flavor: GpuFlavor) -> int:
        """GPUs of ``flavor`` on the nodes that are up, free or not."""
        cap = self._layout.capacity
        return sum(cap[n] for n in self._by_flavor.get(flavor, ()))

    def take(self, placement: Placement) -> None:
        """Reserve a placement's GPUs; raises if that would over-allocate any node."""
        if self._deferred:
            self._settle()
        free = self._free
        for node_id, count in placement.gpus_by_node:
            if free.get(node_id, 0) < count:
                raise ValueError(f"over-allocation of {node_id} by {placement.describe()}")
        self._shift(placement, -1)

    def release(self, placement: Placement) -> None:
        """Give a placement's GPUs back (a preemption being considered)."""
        if self._deferred:
            self._settle()
        self._shift(placement, 1)

    def release_each(self, placements: Iterable[Placement]) -> None:
        """``release(p)`` for each of ``placements`` in order, with the same result: a
        round-based round gives every running gang back before it selects. A flavor the round
        has not looked at yet keeps no buckets, so its gangs only change the counts and the
        total here, and are noted as changed before the first look (as ``_note`` would)."""
        if self._deferred:
            self._settle()
        free = self._free
        totals = self._total
        early = self._early
        shift = self._shift
        own = dict.get  # (never a book's Python-level lookup for what the round holds)
        counts = self._base.live_counts() if self._base is not None else free
        looked = self._buckets
        late = self._late
        for p in placements:
            if p.is_mixed:
                shift(p, 1)
                continue
            flavor = p.flavor
            if flavor in looked or flavor in late:
                shift(p, 1)
                continue
            total = totals.get(flavor)
            if total is None:
                total = self.total_free(flavor)
            changed = early.get(flavor)
            if changed is None:
                changed = early[flavor] = {}
            for node_id, count in p.gpus_by_node:
                old = own(free, node_id)  # (over a book: the round's own count, if changed)
                free[node_id] = (counts[node_id] if old is None else old) + count
                changed[node_id] = None
            totals[flavor] = total + p.num_gpus

    def take_if_free(self, placement: Placement) -> bool:
        """``take(placement)`` if ``can_take(placement)``; returns whether it was taken."""
        if self._deferred:
            self._settle()
        free = self._free
        for node_id, count in placement.gpus_by_node:
            # (a node the round changed is in ``free`` itself: read without ``get``, which
            # over a book is a Python-level method)
            if (free[node_id] if node_id in free else free.get(node_id, 0)) < count:
                return False
        self._shift(placement, -1)
        return True

    def take_back(self, placements: Sequence[Placement]) -> list[bool]:
        """``[take_if_free(p) for p in placements]``, with the same result, for gangs this
        round gave back and has not taken since.

        A round-based round gives every running gang back, selects, and takes the staying
        gangs back where they were; most rounds then read nothing more from this copy (nobody
        waits). Over a book whose counts were in range, while the round has only given GPUs
        back, each such gang fits whatever else is taken back, so the takes are noted and
        applied, in order, when the round next reads or changes anything -- or never. Otherwise
        they are taken one by one now.

        Raises:
            RuntimeError: when the noted takes are applied, if one no longer fits (a gang that
                was not given back by this round was passed).
        """
        if not self._only_released or self._deferred:
            return [self.take_if_free(p) for p in placements]
        self._deferred = list(placements)
        return [True] * len(self._deferred)

    def _settle(self) -> None:
        """Apply the takes :meth:`take_back` noted, in order."""
        pending, self._deferred = self._deferred, []
        for p in pending:
            if not self.take_if_free(p):
                raise RuntimeError(f"take_back of {p.describe()}: it was not given back")

    def _shift(self, placement: Placement, sign: int) -> None:
        if sign < 0:
            self._only_released = False
        if placement.is_mixed:
            totals = {f: self.total_free(f) for f, _c in placement.flavor_counts()}
            for node_id, count in placement.gpus_by_node:
                self._move(node_id, sign * count)
            for f, c in placement.flavor_counts():
                self._total[f] = totals[f] + sign * c
            return
        # (a round releases and takes every running gang: _move inlined)
        flavor = placement.flavor
        total = self._total.get(flavor)
        if total is None:
            total = self.total_free(flavor)
        free = self._free
        all_buckets = self._buckets
        all_late = self._late
        node_flavor = self._flavor
        for node_id, count in placement.gpus_by_node:
            old = free[node_id]
            new = old + sign * count
            node_fl = node_flavor[node_id]
            buckets = all_buckets.get(node_fl)
            if buckets is not None:
                del buckets[old][node_id]
                buckets[new][node_id] = None
            else:
                late = all_late.get(node_fl)
                if late is not None:  # (moved to the end of the order of change)
                    late.pop(node_id, None)
                    late[node_id] = None
                elif self._base is not None:  # (without a book there is nothing to note)
                    self._note(node_id, old, new)
            free[node_id] = new
        self._total[flavor] = total + sign * placement.num_gpus

    def can_take(self, placement: Placement) -> bool:
        if self._deferred:
            self._settle()
        free = self._free
        return all(free.get(n, 0) >= c for n, c in placement.gpus_by_node)

    def find(self, flavor: GpuFlavor, gpus: int, require_locality: bool) -> Placement | None:
        """Choose GPUs for a gang without reserving them; ``None`` if it cannot fit."""
        if self._deferred:
            self._settle()
        if gpus > self.total_free(flavor):
            return None
        if flavor not in self._late and flavor not in self._buckets:
            self._look(flavor)  # (the first look, even for a gang no single node can hold)
        first = self._first
        for k in range(gpus, self._size.get(flavor, 0) + 1):
            node = first(flavor, k)
            if node is not None:
                return Placement.of(flavor, ((node, gpus),))
        if require_locality:
            return None
        return self._spread(flavor, gpus, self._by_flavor[flavor])

    def find_mixed(self, flavors: Sequence[GpuFlavor], gpus: int) -> Placement | None:
        """Choose GPUs of several flavors for one gang, without reserving them.

        Flavors are drawn in the order given (the caller lists the job's fastest first), and
        within a flavor the nodes with most free GPUs first, so the gang spans as few servers
        as it can. ``None`` if the flavors together lack ``gpus`` free GPUs.
        """
        if sum(self.total_free(f) for f in flavors) < gpus:
            return None
        free = self._free
        parts: list[tuple[str, GpuFlavor, int]] = []
        need = gpus
        for f in flavors:
            for n in sorted((n for n in self._by_flavor.get(f, ()) if free[n] > 0),
                            key=lambda n: -free[n]):
                c = min(free[n], need)
                parts.append((n, f, c))
                need -= c
                if need == 0:
                    return Placement.mixed(tuple(parts))
        return None

    def _spread(self, flavor: GpuFlavor, gpus: int, nodes: Sequence[str]) -> Placement | None:
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
                return Placement.of(flavor, tuple(taken))
        return None
