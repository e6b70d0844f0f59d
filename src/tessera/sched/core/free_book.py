"""Free GPUs kept up to date between rounds: a driver's book, and a round's starting point.

Every decision round places gangs on a scratch copy of the free GPUs
(:class:`~tessera.sched.core.placement.FreeGpus`), which finds a gang's best fit by keeping the
nodes of each flavor in *buckets* by free-GPU count. Building those buckets from the per-node
counts walks every node of a flavor; on the full Philly table (552 servers, a decision at
every one of 75,000 events) that walk was an eighth of an event-driven run, although between
two rounds a start or a stop changes one or two nodes.

A :class:`FreeBook` is the same information kept up to date as GPUs are taken and given
back, owned by whoever books them between rounds (the simulated world; the live service
could do the same). For each flavor it holds, per free count ``k``, the positions of the
nodes with exactly ``k`` free GPUs, *sorted in the layout's node order* -- exactly the order
a bucket built from scratch has -- so a round that starts from the book places every gang
where a round that built its buckets anew would. Updating a node is a ``bisect`` into two
short sorted lists, never a walk.

A snapshot carries a book as :meth:`FreeBook.counts`, a read-only
:class:`~collections.abc.Mapping` stamped with the book's version. It is valid until the
book next changes; reading it after that raises (it never answers with counts of another
moment), and :meth:`FreeGpus.of_snapshot <tessera.sched.core.placement.FreeGpus.of_snapshot>`
then derives the free GPUs from the snapshot's running gangs, as it does for a snapshot
without counts.

A node's count may pass outside ``0..capacity`` for a moment while a driver re-books a gang
(a shared gang's second booking is given back just after it is taken); such a node is kept
off the buckets until its count is back in range, and a round never starts from a book with
a node off them.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping
from typing import Protocol

from tessera.model.gpus import GpuFlavor
from tessera.sched.core.domains import DomainMap


class NodeLayout(Protocol):
    """What the book reads of a cluster's static layout. :class:`~tessera.sched.core.free_view.
    Layout` is the one implementation; the book names this Protocol instead of importing it,
    because the free view builds on the book (no import circle between the two files)."""

    @property
    def capacity(self) -> Mapping[str, int]: ...
    @property
    def flavor(self) -> Mapping[str, GpuFlavor]: ...
    @property
    def rack(self) -> Mapping[str, str]: ...
    @property
    def by_flavor(self) -> Mapping[GpuFlavor, tuple[str, ...]]: ...
    @property
    def size(self) -> Mapping[GpuFlavor, int]: ...
    @property
    def position(self) -> Mapping[str, int]: ...
    @property
    def domains(self) -> DomainMap | None: ...


class FreeBook(Mapping[str, int]):
    """Free GPUs per node of one layout, with per-flavor totals and sorted buckets.

    Args:
        layout: the nodes' static layout (:class:`~tessera.sched.core.free_view.Layout`).
        free: free GPUs per node to start from (default: every node fully free); a node
            missing from it starts fully free.

    Reading is a :class:`~collections.abc.Mapping` of node id to free GPUs; writing
    ``book[node_id] = count`` keeps the totals and buckets in step.
    """

    __slots__ = ("_free", "_off", "_sorted", "_total", "gpus_only", "layout", "version")

    def __init__(self, layout: NodeLayout, free: Mapping[str, int] | None = None) -> None:
        self.layout = layout
        cap = layout.capacity
        counts = dict(cap) if free is None else {n: free.get(n, c) for n, c in cap.items()}
        self._free = counts
        self._total: dict[GpuFlavor, int] = {}
        self._sorted: dict[GpuFlavor, list[list[int]]] = {}
        self._off: set[str] = set()
        self.version = 0
        """Bumped by every change; a :class:`FreeCounts` is valid for one version."""
        self.gpus_only = False
        """Set by a driver that knows no job it will ever book asks for CPUs or memory: a
        round started from this book then does not look for any
        (:meth:`~tessera.sched.core.host_free.HostFree.of_snapshot`)."""
        for flavor, ids in layout.by_flavor.items():
            lists: list[list[int]] = [[] for _ in range(layout.size[flavor] + 1)]
            total = 0
            for pos, n in enumerate(ids):
                c = counts[n]
                total += c
                if 0 <= c <= cap[n]:
                    lists[c].append(pos)
                else:
                    self._off.add(n)
            self._sorted[flavor] = lists
            self._total[flavor] = total

    # -- reading -------------------------------------------------------------------------------

    def __getitem__(self, node_id: str) -> int:
        return self._free[node_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._free)

    def __len__(self) -> int:
        return len(self._free)

    def total(self, flavor: GpuFlavor) -> int:
        """Free GPUs of ``flavor`` over its nodes."""
        return self._total.get(flavor, 0)

    def totals(self) -> dict[GpuFlavor, int]:
        """A copy of the free GPUs per flavor."""
        return dict(self._total)

    def positions(self, flavor: GpuFlavor, count: int) -> list[int]:
        """Positions (in ``layout.by_flavor[flavor]``) of the nodes with exactly ``count``
        free GPUs, ascending. The book's own list: read it, never change it."""
        return self._sorted[flavor][count]

    def counts_copy(self) -> dict[str, int]:
        """A copy of the free GPUs per node."""
        return dict(self._free)

    def live_counts(self) -> Mapping[str, int]:
        """The free GPUs per node, the book's own dict: it changes with the book; read it,
        never change it."""
        return self._free

    @property
    def in_range(self) -> bool:
        """Whether every node's count is within ``0..capacity`` (see the module docstring)."""
        return not self._off

    def counts(self) -> FreeCounts:
        """The free GPUs now, as a read-only mapping valid until the book next changes."""
        return FreeCounts(self, self.version)

    # -- writing -------------------------------------------------------------------------------

    def __setitem__(self, node_id: str, count: int) -> None:
        free = self._free
        old = free[node_id]
        if count == old:
            return
        self.version += 1
        free[node_id] = count
        lay = self.layout
        flavor = lay.flavor[node_id]
        self._total[flavor] += count - old
        lists = self._sorted[flavor]
        pos = lay.position[node_id]
        cap = lay.capacity[node_id]
        if 0 <= old <= cap:
            bucket = lists[old]
            del bucket[bisect_left(bucket, pos)]
        else:
            self._off.discard(node_id)
        if 0 <= count <= cap:
            insort(lists[count], pos)
        else:
            self._off.add(node_id)


class FreeCounts(Mapping[str, int]):
    """A :class:`FreeBook` as it stood at one version: what a snapshot carries.

    Reads raise ``RuntimeError`` once the book has changed (see the module docstring).
    """

    __slots__ = ("_book", "_version")

    def __init__(self, book: FreeBook, version: int) -> None:
        self._book = book
        self._version = version

    @property
    def gpus_only(self) -> bool:
        """The book's :attr:`FreeBook.gpus_only` (readable whatever the version)."""
        return self._book.gpus_only

    def current(self) -> FreeBook | None:
        """The book, if it has not changed since these counts were taken; else ``None``."""
        book = self._book
        return book if book.version == self._version else None

    def _checked(self) -> FreeBook:
        book = self.current()
        if book is None:
            raise RuntimeError(
                f"these free-GPU counts were taken at book version {self._version} and the "
                f"book is now at {self._book.version}: a snapshot's free counts are valid only "
                "until its driver books the next change (take a new snapshot)")
        return book

    def __getitem__(self, node_id: str) -> int:
        return self._checked()[node_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._checked())

    def __len__(self) -> int:
        return len(self._checked())
