"""Gang placement: turning "job j runs on flavor f" into GPUs on concrete nodes.

Rules, in order:

1. **All or nothing.** A gang gets every GPU it asks for in one step, or none.
2. **Consolidate.** Prefer one node; among nodes that fit, take the *best fit* (the one with
   the fewest free GPUs that still fits), which keeps large free blocks for large gangs.
   Nodes are kept in buckets by free-GPU count, so finding the best fit costs O(GPUs per
   node), not O(nodes) (the buckets and their order are :class:`~tessera.sched.core.free_view.
   FreeView`'s).
3. **Then one rack, then anywhere** -- unless the job requires locality. A gang split across
   nodes runs at the profiles' *unconsolidated* speed (``perf`` decides how much slower).
   On a cluster with NVLink domains or switch paths, :mod:`tessera.sched.core.domains` decides
   instead: one node, then the smallest domain that holds the gang, small jobs kept away
   from intact domains.
4. **Never over-allocate.** :class:`FreeGpus` is the only bookkeeper and refuses to go below 0.
5. **Feed the GPUs.** When a job of the snapshot asks for CPUs or host memory, the round also
   counts them (:mod:`tessera.sched.core.host_free`): a node is given only the GPUs its free
   CPUs and memory can feed, and a gang placed for a job with a demand carries its amounts
   per node (``Placement.host_by_node``). Otherwise the GPU-only search below runs unchanged.

``FreeGpus`` is a scratch structure owned by one decision round; the snapshot stays immutable.
A round starts either from per-node counts (it then builds a flavor's buckets when it first
needs them) or from a driver's :class:`~tessera.sched.core.free_book.FreeBook`, whose buckets are
kept up to date between rounds (it then builds nothing). This module holds the round's changes
(take, release, the deferred take-back) and the search (:meth:`FreeGpus.find`,
:meth:`FreeGpus.find_mixed`); the nodes' :class:`~tessera.sched.core.free_view.Layout` and the
read side of the counts are in :mod:`tessera.sched.core.free_view`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from tessera.model.gpus import GpuFlavor
from tessera.model.host_need import gang_host_by_node
from tessera.model.resources import HostDemand
from tessera.sched.core.count_index import ByCount, CountIndex
from tessera.sched.core.domains import choose
from tessera.sched.core.free_book import FreeCounts
from tessera.sched.core.free_view import FreeView, Layout
from tessera.sched.core.host_free import HostFree, fed_counts, search_fed
from tessera.sched.core.snapshot import Placement, Snapshot


class FreeGpus(FreeView):
    """Free GPU counts per node, grouped by flavor: one round's scratch copy, which takes and
    gives back gangs and finds GPUs for them.

    Constructed as :class:`~tessera.sched.core.free_view.FreeView` is (``nodes``, ``free``,
    ``layout``, ``base``), or from a snapshot by :meth:`of_snapshot`.
    """

    _host: HostFree | None = None
    """Free CPUs and memory, when the snapshot's jobs ask for them (``None``: GPUs only)."""
    _by_count: ByCount | None = None
    """Nodes by free count in layout order, once a host-aware or domain search asked (every
    change of a count is then noted to it)."""

    @classmethod
    def of_snapshot(cls, snapshot: Snapshot, layout: Layout | None = None) -> FreeGpus:
        """Free GPUs of a snapshot (:meth:`_gpus_of_snapshot`), and its free CPUs and memory
        when any of its jobs asks for them (:meth:`HostFree.of_snapshot`)."""
        view = cls._gpus_of_snapshot(snapshot, layout)
        host = HostFree.of_snapshot(snapshot)
        if host is not None:
            view._host = host
            view._only_released = False  # (every take checks the host too: none deferred)
        return view

    @classmethod
    def _gpus_of_snapshot(cls, snapshot: Snapshot, layout: Layout | None = None) -> FreeGpus:
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

    def take(self, placement: Placement) -> None:
        """Reserve a placement's GPUs; raises if that would over-allocate any node."""
        if self._deferred:
            self._settle()
        free = self._free
        for node_id, count in placement.gpus_by_node:
            if free.get(node_id, 0) < count:
                raise ValueError(f"over-allocation of {node_id} by {placement.describe()}")
        host = self._host
        if host is not None:
            held = host.held(placement)
            if not host.fits(held):
                raise ValueError(f"over-commit of CPUs or host memory by {placement.describe()}")
            host.shift(held, -1)
        self._shift(placement, -1)

    def release(self, placement: Placement) -> None:
        """Give a placement's GPUs back (a preemption being considered)."""
        if self._deferred:
            self._settle()
        if self._host is not None:
            self._host.shift(self._host.held(placement), 1)
        self._shift(placement, 1)

    def release_each(self, placements: Iterable[Placement]) -> None:
        """``release(p)`` for each of ``placements`` in order, with the same result: a
        round-based round gives every running gang back before it selects. A flavor the round
        has not looked at yet keeps no buckets, so its gangs only change the counts and the
        total here, and are noted as changed before the first look (as ``_note`` would)."""
        if self._deferred:
            self._settle()
        host = self._host
        by_count = self._by_count
        if host is not None or by_count is not None:
            placements = list(placements)
            if by_count is not None:
                for p in placements:
                    by_count.touch(p.gpus_by_node)
        if host is not None:
            for p in placements:
                host.shift(host.held(p), 1)
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
        host = self._host
        if host is not None:
            held = host.held(placement)
            if not host.fits(held):
                return False
            host.shift(held, -1)
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
        if self._by_count is not None:
            self._by_count.touch(placement.gpus_by_node)
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
        if not all(free.get(n, 0) >= c for n, c in placement.gpus_by_node):
            return False
        return self._host is None or self._host.fits(self._host.held(placement))

    def find(self, flavor: GpuFlavor, gpus: int, require_locality: bool,
             host: HostDemand | None = None) -> Placement | None:
        """Choose GPUs for a gang without reserving them; ``None`` if it cannot fit.

        ``host``: the job's CPU and memory demand (``JobSpec.host``); read only when the round
        counts host resources (rule 5), and then carried on the placement.
        """
        if self._deferred:
            self._settle()
        if gpus > self.total_free(flavor):
            return None
        if self._domains is not None:  # (a cluster with topology domains: their own rules)
            nodes = self._by_flavor[flavor]
            parts = choose(nodes, self._count_index(flavor), self._free, gpus,
                           require_locality, self._domains)
            if parts is None:
                return None
            if self._host is None:
                return Placement.of(flavor, parts)
            held = gang_host_by_node(parts, host, self._host.nodes)
            if self._host.fits(held):
                return self._host.remember(
                    Placement((flavor,), parts, (), None, (), held if host else ()), held)
            # (the domain's choice cannot feed the gang -- a CPU-only job or a hungry gang holds
            # some of its CPUs: choose again among the GPUs the free hosts can feed, then fall
            # through to the host-aware search, which knows CPUs and memory but not domains)
            fed = fed_counts(self._host, self._free, nodes, host, gpus)
            parts = choose(nodes, CountIndex(nodes, fed), fed, gpus, require_locality,
                           self._domains)
            held = gang_host_by_node(parts or (), host, self._host.nodes)
            if parts is not None and self._host.fits(held):
                return self._host.remember(
                    Placement((flavor,), parts, (), None, (), held if host else ()), held)
        if self._host is not None:
            ids = self._by_flavor.get(flavor, ())
            found = search_fed(self._host, self._free, ids, self._count_index(flavor),
                               self._rack, gpus, require_locality, host)
            if found is None:
                return None
            parts, held = found
            return self._host.remember(
                Placement((flavor,), parts, (), None, (), held if host else ()), held)
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

    def _count_index(self, flavor: GpuFlavor) -> CountIndex:
        """``flavor``'s nodes by free GPUs now (:mod:`tessera.sched.core.count_index`), for the
        searches that break ties by layout order; the round keeps it from the first ask."""
        if self._by_count is None:
            self._by_count = ByCount(self._flavor)
        return self._by_count.of(flavor, self._by_flavor.get(flavor, ()), self._free)

    def find_mixed(self, flavors: Sequence[GpuFlavor], gpus: int,
                   host: HostDemand | None = None) -> Placement | None:
        """Choose GPUs of several flavors for one gang, without reserving them.

        Flavors are drawn in the order given (the caller lists the job's fastest first), and
        within a flavor the nodes with most free GPUs first, so the gang spans as few servers
        as it can. ``None`` if the flavors together lack ``gpus`` free GPUs.
        """
        if sum(self.total_free(f) for f in flavors) < gpus:
            return None
        free: dict[str, int] = self._free
        if self._host is not None:  # (rule 5: only the GPUs the free host can feed)
            hf = self._host
            free = {n: int(min(self._free[n], hf.gpus_fed(n, host, gpus)))
                    for f in flavors for n in self._by_flavor.get(f, ())}
        parts: list[tuple[str, GpuFlavor, int]] = []
        need = gpus
        for f in flavors:
            for n in sorted((n for n in self._by_flavor.get(f, ()) if free[n] > 0),
                            key=lambda n: -free[n]):
                c = min(free[n], need)
                parts.append((n, f, c))
                need -= c
                if need == 0:
                    return self._with_host(Placement.mixed(tuple(parts)), host)
        return None

    def _with_host(self, placement: Placement, host: HostDemand | None) -> Placement:
        """``placement`` carrying the amounts a job with a demand holds on each node."""
        if host is None or self._host is None:
            return placement
        return replace(placement, host_by_node=gang_host_by_node(
            placement.gpus_by_node, host, self._host.nodes))

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
