"""A decision round under a tenancy: per-flavor quotas, cohort trees, fair sharing.

:func:`~tessera.sched.core.decide.decide` runs this round when the snapshot carries a
:class:`~tessera.sched.core.tenancy.Tenancy` that uses more than one-number quotas
(:func:`needs_tenancy_round`); a snapshot with one-number quotas alone keeps the plain round.

Admission cannot decide a per-flavor quota on its own, since the flavor is chosen at placement:
here the quota binds where a ``(job, flavor)`` candidate takes GPUs. The round:

1. **order** -- the policy ranks the jobs; waiting jobs are taken by priority (``JobSpec.priority``,
   highest first), then in its order, except that
   with fair sharing the next job comes from the queue with the lowest weighted dominant
   resource share (:meth:`~tessera.sched.core.quota_book.QuotaBook.share`; ties by rank),
   and with a usage half-life from the queue with the lowest decayed usage per weight
   (:mod:`tessera.sched.core.usage_history`); in a time-sharing queue (``min_admitted_s``) its
   jobs go longest-waiting first, so turns rotate.
2. **place** -- running gangs keep their GPUs and are charged to the
   :class:`~tessera.sched.core.quota_book.QuotaBook`. Each waiting job tries its flavors (a
   per-flavor queue's in the queue's order, among those the policy ranked it on): a flavor
   fits if the queue's quota for it (nominal + what it may borrow through the tree) holds the
   gang and the GPUs are free. Flavor fungibility decides between a flavor that needs
   borrowing and the next flavor, and between preempting and the next flavor.
3. **preempt** -- a job that fits nowhere may stop others by its queue's rules
   (:mod:`tessera.sched.core.quota_preempt`), for at most ``max_preemption_attempts`` jobs.
4. **explain** -- a job held by quota names the flavor quota that holds it; the others get
   the plain reasons (capacity, fragmentation).

Running gangs are never moved to faster flavors here, and a round-based policy's rotation is
replaced by the queues' rules (the round notes it in ``fallbacks``). An elastic policy's size
for a waiting job is placed when the queue's flavor quota (and the free GPUs) hold it, else
the job starts at its own size with a note: growth never passes a per-flavor quota.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.options import PlacementOptions, needs_locality
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.core.quota_book import Key, QuotaBook, QuotaUse
from tessera.sched.core.quota_drain import charge_draining
from tessera.sched.core.quota_preempt import Preemptor
from tessera.sched.core.quotas import QueueQuota, WhenCanBorrow, WhenCanPreempt
from tessera.sched.core.reasons import PendingKind, PendingReason, QuotaHeld, pending_reasons
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sched.core.tenancy import Tenancy
from tessera.sched.elastic.sizes import ElasticSize, sized_views, with_batches

QUOTA_PREEMPTION = "quota preemption"
"""How a victim's note starts: stopped by a queue's preemption rules (reclaim, fair sharing,
within its queue) to admit another job; the live journal writes it as the stop's reason and
``/metrics`` counts it under ``reason="quota"``."""


def needs_tenancy_round(tenancy: Tenancy | None) -> bool:
    """Whether ``tenancy`` uses anything beyond one-number quotas (a cohort, a per-flavor
    quota, fair sharing, preemption rules or time sharing). One-number quotas keep the plain
    round's meaning exactly: nominal + borrowing limit per queue."""
    if tenancy is None:
        return False
    if tenancy.cohorts or tenancy.fair_sharing.enabled \
            or tenancy.fair_sharing.usage_half_life_s is not None:
        return True
    plain = QueueQuota("", 0)
    return any(q.by_flavor or q.cohort is not None or q.preemption != plain.preemption
               or q.min_admitted_s is not None for q in tenancy.queues.values())


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    """What the tenancy round decided (``decide`` wraps it into a Decision)."""

    ranking: Ranking
    placements: dict[JobId, Placement]
    started: tuple[JobId, ...]
    preempted: tuple[JobId, ...]
    pending: dict[JobId, PendingReason]
    fallbacks: tuple[str, ...]
    notes: dict[JobId, str]
    """The policy's notes, plus for each victim ``quota preemption: to admit <job> ...``
    (:data:`QUOTA_PREEMPTION`)."""
    wakeup_s: float | None
    """The policy's wish, or earlier, when a running job of a time-sharing queue with
    waiting jobs reaches its minimum admitted duration (no event marks that instant)."""


def tenancy_round(view: Snapshot, policy: Policy, ctx: DecisionContext,
                  opts: PlacementOptions, lap: Callable[[str], None]) -> RoundOutcome:
    """One round under ``view.tenancy`` (see the module docstring)."""
    tenancy = view.tenancy
    assert tenancy is not None
    now_s = view.now_s
    oracle = ctx.oracle.as_agnostic() if policy.agnostic else ctx.oracle
    free = FreeGpus.of_snapshot(view, ctx.layout(view.cluster))
    split = view.split()
    ranking = policy.rank(PolicyContext(view, oracle, ctx.rng, ctx.solver, ctx.caches))
    lap("order")
    book = QuotaBook(tenancy)
    by_id = {j.spec.job_id: j for j in view.jobs}
    run: dict[JobId, Placement] = {}
    held_by_queue: dict[str, int] = {}
    for j in split.running:
        p = j.placement
        if p is None:
            continue
        run[j.spec.job_id] = p
        q = book.queue_of(j.spec.queue)
        if q is not None:
            held_by_queue[q.name] = held_by_queue.get(q.name, 0) + p.num_gpus
            for k, n in book.charges(q, p):
                book.charge(q.name, k, n)
    charge_draining(book, view.gpu_draining, held_by_queue)  # (stopping runs: quota_drain)
    half_life = tenancy.fair_sharing.usage_half_life_s
    if half_life is not None:
        ctx.usage.advance(now_s, half_life, held_by_queue)
    flavors_of: dict[JobId, list[GpuFlavor]] = {}
    for jid, fl in ranking.candidates:
        flavors_of.setdefault(jid, []).append(fl)
    waiting = [by_id[jid] for jid in flavors_of if jid in by_id and not by_id[jid].running]

    def local(j: JobView) -> bool:
        return needs_locality(j, now_s, opts)

    preemptor = Preemptor(book, free, run, by_id, now_s, local)
    started: list[JobId] = []
    preempted: list[JobId] = []
    quota_held: dict[JobId, tuple[QueueQuota, Key]] = {}
    attempts = opts.max_preemption_attempts
    notes: dict[JobId, str] = dict(ranking.notes)
    sized: dict[JobId, ElasticSize] = {}
    # (queue, GPUs, flavors) found at quota; valid until the next charge (a placement)
    full: dict[tuple[str, int, tuple[GpuFlavor, ...]], tuple[QueueQuota, Key]] = {}
    for j in _order(waiting, book, ctx, tenancy):
        q = book.queue_of(j.spec.queue)
        fls = flavors_of[j.spec.job_id]
        if q is not None and q.by_flavor:
            listed = [f for f in q.flavors if f in fls]
            if not listed:  # none of its flavors has quota: held by (zero) quota
                quota_held[j.spec.job_id] = (q, fls[0])
                continue
            fls = listed
        size = ranking.sizes.get(j.spec.job_id) if ranking.sizes else None
        if size is not None and size.num_gpus != j.spec.num_gpus:
            # An elastic job at the policy's size, within its queue's flavor quotas (no
            # preemption for growth); else at its own size.
            grown = sized_views([j], {j.spec.job_id: size})[0]
            placed, victims, blocked, tried = _place(grown, q, fls, book, free, preemptor,
                                                     local, False)
            if placed is not None:
                sized[j.spec.job_id] = size
            else:
                notes[j.spec.job_id] = (f"size {size.num_gpus} GPUs refused: over its "
                                        f"queue's quota or the free GPUs; runs at its own "
                                        f"{j.spec.num_gpus}")
        if size is None or j.spec.job_id not in sized:
            may = attempts > 0 and q is not None and Preemptor.may_preempt_at_all(q)
            memo = None if may or q is None else (q.name, j.spec.num_gpus, tuple(fls))
            if memo is not None and memo in full:  # same queue, need and flavors: still full
                quota_held[j.spec.job_id] = full[memo]
                continue
            placed, victims, blocked, tried = _place(j, q, fls, book, free, preemptor, local,
                                                     may)
            attempts -= tried
            if memo is not None and placed is None and blocked is not None:
                full[memo] = blocked
        if placed is None:
            if blocked is not None:
                quota_held[j.spec.job_id] = blocked
            continue
        for v in victims:
            del run[v]
            preempted.append(v)
            notes[v] = f"{QUOTA_PREEMPTION}: to admit {j.spec.job_id} (queue {j.spec.queue!r})"
        free.take(placed)
        if q is not None:
            for k, n in book.charges(q, placed):
                book.charge(q.name, k, n)
        full.clear()
        run[j.spec.job_id] = placed
        started.append(j.spec.job_id)
    if sized:
        run = with_batches(run, by_id, sized)
    lap("place")
    lap("preempt")
    pending: dict[JobId, PendingReason] = {}
    others = []
    standing: dict[tuple[str, Key], QuotaUse] = {}
    for j in view.jobs:
        jid = j.spec.job_id
        if jid in run:
            continue
        held = quota_held.get(jid)
        if held is not None:  # (the standing at the end of the round)
            use = standing.get((held[0].name, held[1]))
            if use is None:
                use = standing[(held[0].name, held[1])] = book.standing(*held)
            pending[jid] = PendingReason(PendingKind.QUOTA, _held(use, j.spec.num_gpus))
        else:
            others.append(j)
    if others:
        pending.update(pending_reasons(others, ranking.candidates, ctx.oracle, free,
                                       {j.spec.job_id: local(j) for j in others}))
    lap("explain")
    fallbacks = ranking.fallbacks
    if policy.round_based or ranking.sizes or policy.packs:
        fallbacks = (*fallbacks, f"policy {policy.name!r}: under a cohort tenancy running "
                     "gangs stay put (no rotation, resizing of running gangs or packing); "
                     "the queues' preemption rules decide who stops")
    wakeup = _turn_ends(tenancy, book, by_id, run, pending, now_s)
    if ranking.wakeup_s is not None:
        wakeup = ranking.wakeup_s if wakeup is None else min(wakeup, ranking.wakeup_s)
    return RoundOutcome(ranking, run, tuple(started), tuple(preempted), pending, fallbacks,
                        notes, wakeup)


def _turn_ends(tenancy: Tenancy, book: QuotaBook, by_id: dict[JobId, JobView],
               run: dict[JobId, Placement], pending: dict[JobId, PendingReason],
               now_s: float) -> float | None:
    """The first instant a running job of a time-sharing queue that has waiting jobs will
    have run its ``min_admitted_s`` (``None``: no such queue)."""
    sharing = {n: q.min_admitted_s for n, q in tenancy.queues.items()
               if q.min_admitted_s is not None}
    if not sharing:
        return None
    waiting = {book.tenancy.cluster_queue(by_id[jid].spec.queue) for jid in pending}
    first: float | None = None
    for jid, p in run.items():
        j = by_id[jid]
        name = tenancy.cluster_queue(j.spec.queue)
        m = sharing.get(name) if name is not None else None
        if m is None or name not in waiting:
            continue
        since = j.progress_from_s if j.running and j.placement is p else now_s
        at = max(since + m, now_s)
        if at > now_s and (first is None or at < first):
            first = at
    return first


def _held(use: QuotaUse, needs: int) -> QuotaHeld:
    return QuotaHeld(use.queue, use.used_gpus, use.nominal_gpus, None, needs,
                     flavor=use.flavor, borrowable_gpus=use.borrowable_gpus,
                     cohort=use.cohort, cohort_idle_gpus=use.cohort_idle_gpus)


def _place(
    j: JobView, q: QueueQuota | None, fls: list[GpuFlavor], book: QuotaBook, free: FreeGpus,
    preemptor: Preemptor, local: Callable[[JobView], bool], may_preempt: bool,
) -> tuple[Placement | None, tuple[JobId, ...], tuple[QueueQuota, Key] | None, int]:
    """Where ``j`` runs: ``(placement, victims, quota standing that held it, preemption
    tries)``; the placement is ``None`` when it waits."""
    n = j.spec.num_gpus
    borrow_at: Placement | None = None
    blocked: tuple[QueueQuota, Key] | None = None
    later: list[GpuFlavor] = []
    tries = 0
    room = False  # some flavor had room in the queue's quota
    for fl in fls:
        key = None if q is None else book.key(q, fl)
        placed: Placement | None = None
        if q is not None and not book.fits(q.name, key, n):
            if blocked is None:
                blocked = (q, key)
        else:
            room = True
            if free.total_free(fl) >= n:
                placed = free.find(fl, n, local(j), j.spec.host)
        if placed is not None:
            if q is None or book.used(q.name, key) + n <= book.nominal(q.name, key):
                return placed, (), None, tries
            if q.fungibility.when_can_borrow is WhenCanBorrow.MAY_STOP_SEARCH:
                return placed, (), None, tries
            if borrow_at is None:
                borrow_at = placed
            continue
        later.append(fl)
        if (q is not None and may_preempt and borrow_at is None
                and q.fungibility.when_can_preempt is WhenCanPreempt.MAY_STOP_SEARCH):
            tries = 1
            got = preemptor.try_preempt(j, q, fl)
            if got is not None:
                return got.placed, got.victims, None, tries
            later.remove(fl)
    if borrow_at is not None:
        return borrow_at, (), None, tries
    if q is not None and may_preempt and later:
        tries = 1
        for fl in later:
            got = preemptor.try_preempt(j, q, fl)
            if got is not None:
                return got.placed, got.victims, None, tries
    if blocked is not None and not room:
        return None, (), blocked, tries  # no flavor had room in the queue's quota
    return None, (), None, tries


def _order(waiting: list[JobView], book: QuotaBook, ctx: DecisionContext,
           tenancy: Tenancy) -> Iterator[JobView]:
    """The waiting jobs in the order they are offered GPUs (see the module docstring)."""
    fs = tenancy.fair_sharing
    # Higher priority first (Kueue's queue order), the policy's order among equals: a job
    # admitted ahead of a more important one could only be preempted by it next round.
    waiting = sorted(waiting, key=lambda j: -j.spec.priority)
    shared = {name for name, q in tenancy.queues.items() if q.min_admitted_s is not None}
    if shared:  # time sharing: a queue's jobs take its slots longest-waiting first
        slots = [i for i, j in enumerate(waiting) if _cq(book, j) in shared]
        turn = sorted((waiting[i] for i in slots),
                      key=lambda j: (-j.spec.priority, j.pending_since_s))
        waiting = list(waiting)
        for i, j in zip(slots, turn, strict=True):
            waiting[i] = j
    if not fs.enabled and fs.usage_half_life_s is None:
        yield from waiting
        return
    heads: dict[str, list[JobView]] = {}
    for j in waiting:
        heads.setdefault(_cq(book, j) or "", []).append(j)
    for jobs in heads.values():
        jobs.reverse()  # pop() from the end = the queue's best-ranked job
    rank = {j.spec.job_id: i for i, j in enumerate(waiting)}

    def score(name: str, head: JobView) -> float:
        """The queue's weighted share with its head job admitted (Kueue orders by the share
        a workload would leave its queue at), or its decayed usage per weight."""
        q = tenancy.queues.get(name)
        if q is None:
            return 0.0
        if fs.usage_half_life_s is not None:
            u = ctx.usage.usage(name)
            return u / q.weight if q.weight > 0 else (float("inf") if u > 0 else 0.0)
        key = next(iter(q.flavors)) if q.by_flavor else None
        return book.share(q, extra=(key, head.spec.num_gpus))

    heap = [(score(name, jobs[-1]), rank[jobs[-1].spec.job_id], name)
            for name, jobs in heads.items()]
    heapq.heapify(heap)
    while heap:
        _s, _r, name = heapq.heappop(heap)
        jobs = heads[name]
        yield jobs.pop()
        if jobs:
            heapq.heappush(heap, (score(name, jobs[-1]), rank[jobs[-1].spec.job_id], name))


def _cq(book: QuotaBook, j: JobView) -> str | None:
    return book.tenancy.cluster_queue(j.spec.queue)
