"""One flavor's nodes by free-GPU count, each count's nodes in layout order.

The GPU-only search keeps its own buckets (:class:`~tessera.sched.core.free_view.FreeView`),
whose order within a count is the order of change. The host-aware search
(:func:`~tessera.sched.core.host_free.search_fed`) and the domain search
(:func:`~tessera.sched.core.domains.choose`) break ties by *layout* order instead, and used to
walk every node of a flavor per gang to find them. :class:`ByCount` keeps, per flavor, the
positions of the nodes with exactly *k* free GPUs, ascending, so those searches read the
nodes of the counts they need and nothing else.

An index is built from the counts when a search first asks for its flavor, and kept right by
:meth:`ByCount.touch`: the round's free view calls it with the nodes of every gang it takes or
gives back, and the next search moves those nodes (a bisect each). A view that never searches
this way never builds one (the GPU-only rounds).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping


class CountIndex:
    """One flavor's nodes by free-GPU count, each count's in layout order: ``at[k]`` holds
    the positions (in the flavor's ``ids``) of the nodes with exactly ``k`` free GPUs,
    ascending. Built from the counts at a round's first search of the flavor that asks, then
    moved node by node as gangs are taken and given back (:meth:`ByCount.touch`)."""

    __slots__ = ("at", "cur", "ids", "pos")

    def __init__(self, ids: tuple[str, ...], free: Mapping[str, int]) -> None:
        self.ids = ids
        self.pos = {n: i for i, n in enumerate(ids)}
        self.cur: dict[str, int] = {n: free[n] for n in ids}
        self.at: list[list[int]] = [[] for _ in range(max(self.cur.values(), default=0) + 1)]
        for i, n in enumerate(ids):
            self.at[self.cur[n]].append(i)

    def move(self, node_id: str, count: int) -> None:
        """Note that ``node_id`` has ``count`` free GPUs now."""
        old = self.cur[node_id]
        if old == count:
            return
        i = self.pos[node_id]
        row = self.at[old]
        del row[bisect_left(row, i)]
        while count >= len(self.at):
            self.at.append([])
        insort(self.at[count], i)
        self.cur[node_id] = count

    def first_at_least(self, gpus: int) -> int:
        """The fewest free GPUs, at least ``gpus``, that some node has (0: none has)."""
        at = self.at
        for k in range(max(gpus, 0), len(at)):
            if at[k]:
                return k
        return 0


class ByCount:
    """A round's :class:`CountIndex` per flavor, and the nodes changed since they last looked.

    Args:
        flavor_of: each node's flavor (the layout's).
    """

    __slots__ = ("_dirty", "_flavor_of", "_index")

    def __init__(self, flavor_of: Mapping[str, object]) -> None:
        self._flavor_of = flavor_of
        self._index: dict[object, CountIndex] = {}
        self._dirty: dict[str, None] = {}

    def touch(self, gpus_by_node: Iterable[tuple[str, int]]) -> None:
        """Note that the free GPUs of these nodes changed."""
        dirty = self._dirty
        for n, _c in gpus_by_node:
            dirty[n] = None

    def of(self, flavor: object, ids: tuple[str, ...], free: Mapping[str, int]) -> CountIndex:
        """``flavor``'s nodes (``ids``, a layout's tuple in layout order) by their free GPUs in
        ``free`` now."""
        dirty = self._dirty
        index = self._index
        if dirty:
            flavor_of = self._flavor_of
            for n in dirty:
                ix = index.get(flavor_of.get(n))
                if ix is not None and n in ix.cur:
                    ix.move(n, free[n])
            dirty.clear()
        ix = index.get(flavor)
        if ix is None or ix.ids is not ids:
            ix = index[flavor] = CountIndex(ids, free)
        return ix
