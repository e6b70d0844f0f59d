"""Free CPUs and host memory per node during one decision round.

:class:`~tessera.sched.core.placement.FreeGpus` counts GPUs; when a job of the snapshot asks
for host resources (``JobSpec.host``) or a running gang holds explicit ones
(``Placement.host_by_node``), it also carries a :class:`HostFree`, and then no node is given a
gang whose CPUs or memory it cannot hold. What a gang holds on a node is
:func:`tessera.model.host_need.gang_host_by_node`'s answer -- the same rule the simulator
drivers, the live service and ``explain`` use.

When no job asks and no placement carries amounts, every gang holds its GPUs' proportional
share, which always fits where its GPUs fit: :meth:`HostFree.of_snapshot` returns ``None`` and
the round keeps its GPU-only fast path (the bucket search, the deferred take-back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tessera.model.host_need import EPS, gang_host_by_node, gpus_fed, per_gpu_need
from tessera.model.nodes import Node
from tessera.model.resources import HostDemand
from tessera.sched.core.count_index import CountIndex
from tessera.sched.core.free_book import FreeCounts
from tessera.sched.core.snapshot import Placement, Snapshot

Held = tuple[tuple[str, float, float], ...]


def asks_for_host(snapshot: Snapshot) -> bool:
    """Whether any job of ``snapshot`` asks for CPUs/memory or holds explicit amounts."""
    for j in snapshot.jobs:
        if j.spec.host is not None:
            return True
        p = j.placement
        if p is not None and p.host_by_node:
            return True
    return False


class HostFree:
    """Free CPUs and memory per up node, with what each running gang holds.

    Args:
        nodes: the up nodes.
        held_by: what each running gang holds, by its placement (a running job's
            ``JobSpec.host`` is not on its placement unless the core filled it; this map keeps
            the booking and the give-back of a running gang the same).
    """

    __slots__ = ("_failed", "_held_by", "_last", "cpus", "mem_gib", "nodes", "share")

    def __init__(self, nodes: Sequence[Node], held_by: Mapping[Placement, Held] | None = None
                 ) -> None:
        self.nodes: dict[str, Node] = {n.node_id: n for n in nodes}
        self.cpus: dict[str, float] = {n.node_id: float(n.cpu_cores) for n in nodes}
        self.mem_gib: dict[str, float] = {n.node_id: float(n.mem_gib) for n in nodes}
        self._held_by: dict[Placement, Held] = dict(held_by or {})
        self.share: dict[str, tuple[float, float]] = {
            n.node_id: per_gpu_need(None, 1, n) for n in nodes}
        """Each node's proportional ``(cpus, mem_gib)`` per GPU."""
        self._last: tuple[Placement, Held] | None = None
        """The last placement a search built with its amounts (:meth:`remember`)."""
        self._failed: list[tuple[object, bool, float, float, int]] = []
        """Searches that found nothing since the last give-back, as ``(flavor, locality,
        cpus per GPU, GiB per GPU, GPUs)``; one that asks at least as much fails too
        (see :meth:`known_to_fail`)."""

    @classmethod
    def of_snapshot(cls, snapshot: Snapshot) -> HostFree | None:
        """The free host resources of a snapshot's up nodes after its running gangs, or
        ``None`` when nobody asks for any (see the module docstring)."""
        free = snapshot.free_gpus
        if isinstance(free, FreeCounts) and free.gpus_only:
            return None  # (the driver knows no job asks: skip the walk over the jobs)
        if not snapshot.host_held and not asks_for_host(snapshot):
            return None
        out = cls(snapshot.up_nodes())
        out.shift(snapshot.host_held, -1)  # (running CPU-only jobs: sched/core/cpu_stage)
        for j in snapshot.split().running:
            p = j.placement
            if p is None:
                continue
            held = gang_host_by_node(p.gpus_by_node, j.spec.host, out.nodes, p.host_by_node)
            out._held_by[p] = held
            out.shift(held, -1)
        return out

    def held(self, placement: Placement) -> Held:
        """What ``placement`` holds: a running gang's booking, else the placement's own
        amounts, else its GPUs' proportional share."""
        known = self._held_by.get(placement) if self._held_by else None
        if known is not None:
            return known
        last = self._last
        if last is not None and last[0] is placement:
            return last[1]
        return gang_host_by_node(placement.gpus_by_node, None, self.nodes,
                                 placement.host_by_node)

    def remember(self, placement: Placement, held: Held) -> Placement:
        """Note that ``placement`` (built by a search, not a running gang's) holds ``held`` --
        what :meth:`held` would compute for it -- so that the take which follows a search
        does not compute it again; returns ``placement``."""
        self._last = (placement, held)
        return placement

    def fits(self, held: Held) -> bool:
        cpus, mem = self.cpus, self.mem_gib
        return all(cpus.get(n, 0.0) + EPS >= c and mem.get(n, 0.0) + EPS >= m
                   for n, c, m in held)

    def shift(self, held: Held, sign: int) -> None:
        """Give back (``sign`` 1) or take (-1) the amounts of ``held``."""
        cpus, mem = self.cpus, self.mem_gib
        if sign > 0:
            self._failed.clear()
        for n, c, m in held:
            if n in cpus:
                cpus[n] += sign * c
                mem[n] += sign * m

    def known_to_fail(self, key: tuple[object, bool, float, float, int]) -> bool:
        """Whether a search like one that failed since the last give-back, asking no less
        (no fewer GPUs, CPUs or GiB per GPU, and locality if it needed none), must fail.
        Searches only fail more as gangs are taken, so the answer stays right until something
        is given back (which forgets them all)."""
        flavor, local, c, m, g = key
        for f, fl, fc, fm, fg in self._failed:
            if (f is flavor and (local or not fl) and g >= fg and (c < 0) == (fc < 0)
                    and c >= fc and m >= fm):
                return True
        return False

    def note_failed(self, key: tuple[object, bool, float, float, int]) -> None:
        if len(self._failed) < 64:
            self._failed.append(key)

    def gpus_fed(self, node_id: str, host: HostDemand | None, gang_gpus: int) -> int | float:
        """How many GPUs of a ``gang_gpus``-GPU gang ``node_id``'s free host can feed."""
        node = self.nodes.get(node_id)
        if node is None:
            return 0
        cpg, mpg = per_gpu_need(host, gang_gpus, node)
        return gpus_fed(self.cpus[node_id], self.mem_gib[node_id], cpg, mpg)

    def largest_free(self, node_ids: Sequence[str]) -> tuple[float, float]:
        """The most free CPUs and the most free memory on any of ``node_ids``."""
        cpus = max((self.cpus.get(n, 0.0) for n in node_ids), default=0.0)
        mem = max((self.mem_gib.get(n, 0.0) for n in node_ids), default=0.0)
        return cpus, mem


def fed_counts(host_free: HostFree, free: Mapping[str, int], ids: tuple[str, ...],
               host: HostDemand | None, gpus: int) -> dict[str, int]:
    """``free`` (every up node's free GPUs) with each of ``ids``' counts capped by the GPUs of
    a ``gpus``-GPU gang its free CPUs and memory can feed: the counts a domain search reads so
    that the domain it picks can feed the gang (:meth:`FreeGpus.find
    <tessera.sched.core.placement.FreeGpus.find>`)."""
    out = {n: free[n] for n in host_free.nodes}  # (a book reads through: no dict(free))
    for n in ids:
        fed = host_free.gpus_fed(n, host, gpus)
        if fed < out[n]:
            out[n] = int(fed)
    return out


def find_fed(
    host_free: HostFree,
    free: Mapping[str, int],
    ids: tuple[str, ...],
    rack: Mapping[str, str],
    gpus: int,
    require_locality: bool,
    host: HostDemand | None,
) -> tuple[tuple[str, int], ...] | None:
    """GPUs for a gang on nodes whose free CPUs and memory can feed them, or ``None``.

    The same rules as the GPU-only search (:meth:`FreeGpus.find
    <tessera.sched.core.placement.FreeGpus.find>`), on each node's *usable* GPUs -- its free
    GPUs capped by :meth:`HostFree.gpus_fed`: best fit on one node (fewest free GPUs that
    still hold the gang, earliest in layout order on a tie), then one rack, then anywhere.
    ``ids``: the flavor's nodes in layout order (a layout's tuple).
    """
    found = search_fed(host_free, free, ids, CountIndex(ids, free), rack, gpus,
                       require_locality, host)
    return found[0] if found is not None else None


def search_fed(
    host_free: HostFree,
    free: Mapping[str, int],
    ids: tuple[str, ...],
    by_count: CountIndex,
    rack: Mapping[str, str],
    gpus: int,
    require_locality: bool,
    host: HostDemand | None,
) -> tuple[tuple[tuple[str, int], ...], Held] | None:
    """:func:`find_fed`'s answer with what the gang holds on each of its nodes (the amounts
    :func:`~tessera.model.host_need.gang_host_by_node` gives: the demand's per-GPU amounts,
    else the node's proportional share, times the GPUs there); ``by_count``: the flavor's
    nodes by free GPUs now."""
    if not ids:
        return None
    fixed = host.per_gpu_amounts(gpus) if host is not None else None
    flavor = host_free.nodes[ids[0]].flavor
    # (proportional needs differ by node: keyed by -1, compared by GPUs and locality only)
    key = (flavor, require_locality,
           fixed[0] if fixed else -1.0, fixed[1] if fixed else -1.0, gpus)
    if host_free._failed and host_free.known_to_fail(key):
        return None
    cpus, mem, share = host_free.cpus, host_free.mem_gib, host_free.share
    # One node: the fewest free GPUs that hold the gang and whose host can feed it (the
    # earliest such node in layout order on a tie). The nodes are kept by free count, each
    # count's in layout order (:class:`~tessera.sched.core.count_index.CountIndex`): only the
    # nodes with at least ``gpus`` free have their host checked, fewest free first, and the
    # first that feeds it wins.
    at = by_count.at
    for k in range(gpus, len(at)):
        for i in at[k]:
            n = ids[i]
            cpg, mpg = fixed if fixed is not None else share[n]
            c, m = cpg * gpus, mpg * gpus
            if cpus[n] + EPS >= c and mem[n] + EPS >= m:
                return ((n, gpus),), ((n, c, m),)
    if require_locality:
        host_free.note_failed(key)
        return None
    usable: dict[str, int] = {}
    for n in ids:
        f = free[n]  # (every id is an up node: over a book, read through)
        if f <= 0:
            continue
        cpg, mpg = fixed if fixed is not None else share[n]
        fed = gpus_fed(cpus[n], mem[n], cpg, mpg)
        u = int(f if fed >= f else fed)
        if u > 0:
            usable[n] = u
    if sum(usable.values()) < gpus:
        host_free.note_failed(key)
        return None
    by_rack: dict[str, list[str]] = {}
    for n in usable:
        by_rack.setdefault(rack[n], []).append(n)
    candidates = [ns for ns in by_rack.values() if sum(usable[n] for n in ns) >= gpus]
    pool = (min(candidates, key=lambda ns: sum(usable[n] for n in ns)) if candidates
            else list(usable))
    taken: list[tuple[str, int]] = []
    need = gpus
    for n in sorted(pool, key=lambda n: -usable[n]):
        c = min(usable[n], need)
        taken.append((n, c))
        need -= c
        if need == 0:
            parts = tuple(taken)
            return parts, gang_host_by_node(parts, host, host_free.nodes)
    return None
