"""The nodes' layout and a round's view of their free GPUs, in best-fit order.

A gang placement (:mod:`tessera.sched.core.placement`) asks two things of a cluster: its static
shape -- which nodes, of which flavor, in which rack, how many GPUs each -- and, during one
decision round, how many GPUs each node has free and which node is the *best fit* for a gang.
This module holds both:

* :class:`Layout`, the static shape, computed once per cluster (drivers and previews cache it,
  and a driver's :class:`~tessera.sched.core.free_book.FreeBook` is built over it);
* :class:`FreeView`, the read side of a round's free counts: per node, per flavor
  (:meth:`FreeView.total_free`), the largest free block (:class:`BlockInfo`), and the first node
  with exactly *k* free GPUs. Nodes are kept in buckets by free-GPU count, so finding the best
  fit costs O(GPUs per node), not O(nodes); the buckets' order decides between equally good
  nodes and is therefore part of every placement (see :class:`FreeView`).

Changing the counts (taking and giving back gangs) and searching for a gang's GPUs are
:class:`~tessera.sched.core.placement.FreeGpus`'s, the subclass every caller uses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tessera.model.cluster import Node
from tessera.model.gpus import GpuFlavor
from tessera.sched.core.domains import DomainMap
from tessera.sched.core.free_book import FreeBook
from tessera.sched.core.getters import counts_of
from tessera.sched.core.snapshot import Placement


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
    domains: DomainMap | None = None
    """The nodes' NVLink domains and switches, ``None`` when no node names any (then gangs
    are placed by node and rack only; see :mod:`tessera.sched.core.domains`)."""

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
            domains=DomainMap.of(nodes),
        )


def _sum_over(free: Mapping[str, int], nodes: tuple[str, ...]) -> int:
    """``sum(free[n] for n in nodes)``, with the lookups done in C
    (:func:`~tessera.sched.core.getters.counts_of`): a round sums every node of a flavor once,
    and clusters have hundreds of nodes."""
    return sum(counts_of(free, nodes))


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


class FreeView(ABC):
    """Free GPU counts per node, grouped by flavor: the read side of one round's scratch copy.

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

    This class only reads and moves counts; a subclass changes them by gangs and may note
    changes to apply later (``_deferred``, applied by ``_settle`` before any read):
    :class:`~tessera.sched.core.placement.FreeGpus` is the one to construct.

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
        self._domains = lay.domains
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

    @abstractmethod
    def _settle(self) -> None:
        """Apply the changes noted in ``_deferred`` (the subclass that notes them says how)."""
