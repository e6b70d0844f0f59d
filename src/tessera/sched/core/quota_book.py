"""Quota accounting for one decision round: usage by (queue, flavor), up the cohort tree.

The book follows Kueue's hierarchical-cohort arithmetic (``pkg/cache`` resource nodes), one
*key* at a time. A key is a GPU flavor for per-flavor queues, or ``None`` for the any-flavor
form (every GPU counts the same):

* a node (queue or cohort) has a **quota** for the key (``nominal``), a **borrowing limit** and
  a **lending limit**; its **guaranteed** part is ``subtree - lending_limit`` when a lending
  limit is set (else 0): what the node keeps for itself and never lends;
* a queue's **subtree quota** is its nominal quota; a cohort's is its own nominal quota plus,
  for each child, ``child.subtree - child.guaranteed`` (what the child lends up);
* a queue's **usage** is what its running jobs hold; a cohort's usage is, summed over its
  children, ``max(0, child.usage - child.guaranteed)`` (what they take from the shared pool);
* what a queue may still take (:meth:`QuotaBook.available`) is, at the root,
  ``subtree - usage``; below the root, its unused guaranteed part plus what its parent has
  available, the latter capped, when the node has a borrowing limit, at
  ``subtree - guaranteed - max(0, usage - guaranteed) + borrowing_limit``.

A queue with no cohort is its own root: it uses its nominal quota and nothing else. A job of a
per-flavor queue may run only on the flavors the queue lists; a job whose queue the tenancy
does not know is not limited (as with the one-number quotas).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.sched.core.quotas import FlavorQuota, QueueQuota
from tessera.sched.core.snapshot import Placement
from tessera.sched.core.tenancy import Tenancy

Key = GpuFlavor | None
"""A flavor for per-flavor quotas, ``None`` for any-flavor quotas."""

_UNLIMITED = 1 << 40


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """A queue's standing for one key (what ``explain`` shows).

    Attributes:
        queue: the queue.
        flavor: the flavor (``None``: any flavor).
        used_gpus: GPUs its jobs hold of that key.
        nominal_gpus: its nominal quota.
        borrowable_gpus: beyond its unused nominal quota, what it could still borrow now.
        cohort: its cohort (``None``: none).
        cohort_idle_gpus: quota of the cohort tree nobody uses and the queue could borrow.
    """

    queue: str
    flavor: GpuFlavor | None
    used_gpus: int
    nominal_gpus: int
    borrowable_gpus: int
    cohort: str | None
    cohort_idle_gpus: int


class QuotaBook:
    """Usage by (queue, key) and by (cohort, key), with what each queue may still take.

    Build it once per round from the tenancy (:meth:`of`), charge the running jobs
    (:meth:`charge`), then ask :meth:`fits` for each ``(job, flavor)`` candidate and charge
    the ones placed; a preemption :meth:`refund` s its victims. Every operation costs
    O(depth of the tree).
    """

    def __init__(self, tenancy: Tenancy) -> None:
        self.tenancy = tenancy
        self._parent: dict[str, str | None] = {}
        self._quota: dict[tuple[str, Key], FlavorQuota] = {}
        self._subtree: dict[tuple[str, Key], int] = {}
        self._usage: dict[tuple[str, Key], int] = {}
        self._weight: dict[str, float] = {}
        self._keys: set[Key] = set()
        for q in tenancy.queues.values():
            node = _q(q.name)
            self._parent[node] = None if q.cohort is None else _c(q.cohort)
            self._weight[node] = q.weight
            for key, fq in _lines(q):
                self._quota[(node, key)] = fq
                self._keys.add(key)
        depth: dict[str, int] = {}
        for c in tenancy.cohorts.values():
            node = _c(c.name)
            self._parent[node] = None if c.parent is None else _c(c.parent)
            self._weight[node] = c.weight
            depth[node] = len(tenancy.ancestors(c.name))
            lines: dict[Key, FlavorQuota] = {f: fq for f, fq in c.flavors.items()}
            if not c.flavors and c.any_flavor is not None:
                lines[None] = c.any_flavor
            for key, fq in lines.items():
                self._quota[(node, key)] = fq
                self._keys.add(key)
        # Subtree quotas bottom-up: queues, then cohorts deepest first.
        order = [_q(n) for n in tenancy.queues] + sorted(depth, key=lambda n: -depth[n])
        for node in order:
            for key in self._keys:
                line = self._quota.get((node, key))
                mine = line.nominal_gpus if line is not None else 0
                total = self._subtree.get((node, key), 0) + mine
                self._subtree[(node, key)] = total
                parent = self._parent[node]
                if parent is not None:
                    lent = total - self._guaranteed(node, key)
                    self._subtree[(parent, key)] = self._subtree.get((parent, key), 0) + lent
        # What each node may take, per key, valid while the usage is unchanged: a round asks
        # for every waiting job but charges only the few it places.
        self._memo: dict[tuple[str, Key], int] = {}
        self._shares: dict[str, dict[tuple[Key, int] | None, float]] = {}
        self._roots = {q.name: tenancy.root(q.cohort) for q in tenancy.queues.values()
                       if q.cohort is not None}

    @classmethod
    def of(cls, tenancy: Tenancy) -> QuotaBook:
        """An empty book (no usage) for ``tenancy``."""
        return cls(tenancy)

    # -- keys ----------------------------------------------------------------------------

    def queue_of(self, name: str) -> QueueQuota | None:
        """The queue a job's ``queue`` names (a queue or a local queue), ``None`` if unknown."""
        cq = self.tenancy.cluster_queue(name)
        return None if cq is None else self.tenancy.queues[cq]

    @staticmethod
    def key(q: QueueQuota, flavor: GpuFlavor) -> Key:
        return flavor if q.by_flavor else None

    @staticmethod
    def allows(q: QueueQuota, flavor: GpuFlavor) -> bool:
        """Whether a job of ``q`` may run on ``flavor`` at all (per-flavor queues list theirs)."""
        return not q.by_flavor or flavor in q.flavors

    def charges(self, q: QueueQuota, p: Placement) -> Iterable[tuple[Key, int]]:
        """What a gang at ``p`` costs ``q``: per flavor, or its GPUs of any flavor."""
        if q.by_flavor:
            return p.flavor_counts()
        return ((None, p.num_gpus),)

    # -- usage ---------------------------------------------------------------------------

    def charge(self, queue: str, key: Key, gpus: int) -> None:
        """Add ``gpus`` (may be negative) to the queue's usage of ``key``, up the tree."""
        node: str | None = _q(queue)
        delta = gpus
        if delta:
            self._memo.clear()
            self._shares.pop(queue, None)  # (a share reads its own queue's usage alone)
        while node is not None and delta:
            k = (node, key)
            old = self._usage.get(k, 0)
            new = old + delta
            self._usage[k] = new
            g = self._guaranteed(node, key)
            delta = max(0, new - g) - max(0, old - g)
            node = self._parent[node]

    def refund(self, queue: str, key: Key, gpus: int) -> None:
        """Take ``gpus`` off the queue's usage (a victim's gang)."""
        self.charge(queue, key, -gpus)

    def used(self, queue: str, key: Key) -> int:
        return self._usage.get((_q(queue), key), 0)

    def nominal(self, queue: str, key: Key) -> int:
        return self._subtree.get((_q(queue), key), 0)

    def borrowing(self, queue: str, key: Key) -> bool:
        """Whether the queue uses more than its nominal quota of ``key``."""
        return self.used(queue, key) > self.nominal(queue, key)

    # -- capacity ------------------------------------------------------------------------

    def _guaranteed(self, node: str, key: Key) -> int:
        fq = self._quota.get((node, key))
        if fq is None or fq.lending_limit_gpus is None:
            return 0
        return max(0, self._subtree.get((node, key), 0) - fq.lending_limit_gpus)

    def _available(self, node: str, key: Key) -> int:
        k = (node, key)
        got = self._memo.get(k)
        if got is not None:
            return got
        got = self._memo[k] = self._compute(node, key)
        return got

    def _compute(self, node: str, key: Key) -> int:
        k = (node, key)
        sub = self._subtree.get(k, 0)
        use = self._usage.get(k, 0)
        parent = self._parent[node]
        if parent is None:
            return sub - use
        g = self._guaranteed(node, key)
        local = max(0, g - use)
        up = self._available(parent, key)
        fq = self._quota.get(k)
        limit = fq.borrowing_limit_gpus if fq is not None else None
        if limit is not None:
            up = min(up, sub - g - max(0, use - g) + limit)
        return local + max(0, up)

    def available(self, queue: str, key: Key) -> int:
        """GPUs of ``key`` the queue may still take: its unused quota plus what it may
        borrow through its cohort tree now."""
        return self._available(_q(queue), key)

    def fits(self, queue: str, key: Key, gpus: int) -> bool:
        return gpus <= self.available(queue, key)

    def standing(self, q: QueueQuota, key: Key) -> QuotaUse:
        """The queue's standing for ``key`` (for ``explain``)."""
        used, nominal = self.used(q.name, key), self.nominal(q.name, key)
        avail = self.available(q.name, key)
        borrowable = max(0, avail - max(0, nominal - used))
        idle = 0
        if q.cohort is not None:
            node = _c(q.cohort)
            idle = max(0, self._available(node, key))
        return QuotaUse(q.name, key, used, nominal, borrowable, q.cohort, idle)

    # -- fair sharing ----------------------------------------------------------------------

    def same_tree(self, a: str, b: str) -> bool:
        """Whether queues ``a`` and ``b`` sit in one cohort tree."""
        ra = self._roots.get(a)
        return ra is not None and ra == self._roots.get(b)

    def lendable(self, key: Key, root: str) -> int:
        """What the tree rooted at cohort ``root`` holds for ``key`` to lend (the
        denominator of the dominant resource share)."""
        return self._subtree.get((_c(root), key), 0)

    def share(self, q: QueueQuota, extra: tuple[Key, int] | None = None,
              less: Iterable[tuple[Key, int]] = ()) -> float:
        """Kueue's dominant resource share of ``q``, divided by its weight: the largest,
        over keys, of what the queue borrows above its nominal quota per GPU its cohort tree
        can lend (times 1000). ``extra`` adds a gang to its usage, ``less`` takes gangs off.
        A weight of 0 makes any borrowing share infinite (it only borrows what nobody with a
        weight wants)."""
        if q.cohort is None:
            return 0.0
        if less:
            return self._share(q, extra, less)
        memo = self._shares.setdefault(q.name, {})
        got = memo.get(extra)
        if got is None:
            got = memo[extra] = self._share(q, extra, ())
        return got

    def _share(self, q: QueueQuota, extra: tuple[Key, int] | None,
               less: Iterable[tuple[Key, int]]) -> float:
        assert q.cohort is not None
        root = self._roots[q.name]
        node = _q(q.name)
        adjust: dict[Key, int] = {}
        if extra is not None:
            adjust[extra[0]] = adjust.get(extra[0], 0) + extra[1]
        for k, n in less:
            adjust[k] = adjust.get(k, 0) - n
        best = 0.0
        keys = self._keys if not q.by_flavor else q.flavors.keys()
        for key in keys:
            over = self._usage.get((node, key), 0) + adjust.get(key, 0) - \
                self._subtree.get((node, key), 0)
            if over <= 0:
                continue
            pool = self.lendable(key, root)
            best = max(best, over * 1000.0 / pool if pool > 0 else float(_UNLIMITED))
        if best == 0.0:
            return 0.0
        return best / q.weight if q.weight > 0 else float("inf")


def _q(name: str) -> str:
    return "q:" + name


def _c(name: str) -> str:
    return "c:" + name


def _lines(q: QueueQuota) -> Iterable[tuple[Key, FlavorQuota]]:
    if q.by_flavor:
        return q.flavors.items()
    return ((None, q.any_flavor),)
