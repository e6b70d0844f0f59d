"""Preemption under a tenancy: who may be stopped for a pending job, and which ones.

Who (Kueue's candidate rules, per the preempting job's queue, :class:`QueuePreemption`):

* **its own queue** (``within_queue``): ``LowerPriority`` -- jobs of lower priority;
  ``LowerOrNewerEqualPriority`` -- also equal-priority jobs submitted later. With
  **time sharing** (the queue's ``min_admitted_s``), an equal-priority job of the queue that
  has run at least ``min_admitted_s`` may be stopped too, so jobs that each want the whole
  quota take turns (Kueue #8522);
* **other queues of its cohort tree** (``reclaim_within_cohort``), only jobs whose queue
  borrows the flavor (uses more than its nominal quota of it): ``LowerPriority`` -- of lower
  priority; ``Any`` -- any. Without fair sharing this is *reclaim* (Kueue's classical
  preemption): allowed only while the pending job's queue uses less than its nominal quota, and
  the victims must then let the job fit *within* that nominal quota; otherwise (or when no such
  set exists) only its own queue's jobs are stopped, and it may borrow. With **fair
  sharing** (Kueue's fair preemption), victims come from the queue with the highest weighted
  share first (its own queue's jobs need no strategy); another queue's job must pass the
  first strategy -- ``LessThanOrEqualToFinalShare``: the preempting queue's share with the job
  admitted is at most the victim queue's share without the victim; a job that failed it gets
  a second pass under ``LessThanInitialShare``, when listed: the preempting queue's share is
  below the victim queue's share before the preemption.

Which (predictable, issue 32 part 4): candidates are taken other queues' (borrowing) jobs
before the preemptor's own queue's, then lowest priority first, then most recently started,
then by job id (deterministic for the same state), until the job fits (quota
and GPUs); then, newest choice excepted, each chosen victim is given back its GPUs when the job
still fits without stopping it, so no more is freed than needed. A job started in this round is
never a victim and a victim is stopped once, so within one decision nobody is preempted twice;
a reclaim takes back only borrowed quota and a fair-sharing preemption leaves the preemptor's
share at most the victim's, so the victim cannot take the GPUs back in the next round without
a change of state (no loop, Kueue #3779).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.quota_book import QuotaBook
from tessera.sched.core.quotas import QueueQuota, ReclaimWithinCohort, WithinQueue
from tessera.sched.core.snapshot import JobView, Placement
from tessera.sched.core.tenancy import FairPreemption


@dataclass(frozen=True, slots=True)
class Preemption:
    """A job's place bought by stopping ``victims``."""

    placed: Placement
    victims: tuple[JobId, ...]


def started_s(v: JobView) -> float:
    """When a running job's current run started (its progress start)."""
    return v.progress_from_s


def may_preempt_own(q: QueueQuota, j: JobView, v: JobView, now_s: float) -> bool:
    """Whether ``j`` may stop ``v`` of its own queue ``q``."""
    rule = q.preemption.within_queue
    pj, pv = j.spec.priority, v.spec.priority
    if rule is not WithinQueue.NEVER and pv < pj:
        return True
    if (rule is WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY and pv == pj
            and v.spec.submit_time_s > j.spec.submit_time_s):
        return True
    return (q.min_admitted_s is not None and pv == pj
            and now_s - started_s(v) >= q.min_admitted_s)


def may_reclaim(q: QueueQuota, j: JobView, v: JobView) -> bool:
    """Whether ``j``'s queue ``q`` may stop ``v`` of another queue (which must borrow)."""
    rule = q.preemption.reclaim_within_cohort
    if rule is ReclaimWithinCohort.NEVER:
        return False
    return rule is ReclaimWithinCohort.ANY or v.spec.priority < j.spec.priority


def victim_order(v: JobView, own_queue: bool) -> tuple[bool, int, float, str]:
    """Jobs of other queues (on borrowed quota) before the preemptor's own queue (Kueue's
    order: lent quota is taken back before one's own jobs stop), then lowest priority, then
    most recently started, then job id."""
    return (own_queue, v.spec.priority, -started_s(v), str(v.spec.job_id))


class Preemptor:
    """Finds victims for pending jobs of one round (see the module docstring)."""

    def __init__(self, book: QuotaBook, free: FreeGpus, run: dict[JobId, Placement],
                 by_id: dict[JobId, JobView], now_s: float,
                 local: Callable[[JobView], bool]) -> None:
        self.book = book
        self.free = free
        self.run = run
        self.by_id = by_id
        self.now_s = now_s
        self.local = local
        fs = book.tenancy.fair_sharing
        self.fair = fs.enabled
        self.strategies = fs.strategies
        self._on: dict[GpuFlavor, list[JobView]] | None = None

    def _running_on(self, fl: GpuFlavor) -> list[JobView]:
        """The jobs that ran before this round with GPUs of ``fl`` (indexed once)."""
        if self._on is None:
            self._on = {}
            for vid, p in self.run.items():
                v = self.by_id[vid]
                if v.running and v.placement is p:
                    for f, _n in p.flavor_counts():
                        self._on.setdefault(f, []).append(v)
        return self._on.get(fl, [])

    @staticmethod
    def may_preempt_at_all(q: QueueQuota) -> bool:
        """Whether any rule lets ``q``'s jobs preempt (else no candidate is ever looked at)."""
        return (q.preemption.within_queue is not WithinQueue.NEVER
                or q.preemption.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
                or q.min_admitted_s is not None)

    def candidates(self, j: JobView, q: QueueQuota, fl: GpuFlavor) -> list[JobView]:
        """Running jobs (since before this round) on ``fl`` that ``j`` may stop, in victim
        order."""
        out: list[tuple[tuple[bool, int, float, str], JobView]] = []
        book = self.book
        run = self.run
        for v in self._running_on(fl):
            if run.get(v.spec.job_id) is not v.placement:
                continue  # stopped already in this round
            vq = book.queue_of(v.spec.queue)
            if vq is None:
                continue
            if vq.name == q.name:
                if may_preempt_own(q, j, v, self.now_s):
                    out.append((victim_order(v, True), v))
            elif (book.same_tree(q.name, vq.name)
                  and may_reclaim(q, j, v)
                  and book.borrowing(vq.name, book.key(vq, fl))):
                out.append((victim_order(v, False), v))
        out.sort(key=lambda o: o[0])
        return [v for _o, v in out]

    def _fits(self, j: JobView, q: QueueQuota, fl: GpuFlavor, borrow: bool) -> Placement | None:
        """Where ``j`` fits on ``fl`` now (within its queue's nominal quota unless
        ``borrow``), or ``None``."""
        n = j.spec.num_gpus
        book = self.book
        key = book.key(q, fl)
        if not borrow and book.used(q.name, key) + n > book.nominal(q.name, key):
            return None
        if not book.fits(q.name, key, n) or self.free.total_free(fl) < n:
            return None
        return self.free.find(fl, n, self.local(j), j.spec.host)

    def _stop(self, v: JobView, sign: int) -> None:
        p = self.run[v.spec.job_id]
        vq = self.book.queue_of(v.spec.queue)
        assert vq is not None
        if sign < 0:
            self.free.release(p)
        else:
            self.free.take(p)
        for k, c in self.book.charges(vq, p):
            self.book.charge(vq.name, k, sign * c)

    def try_preempt(self, j: JobView, q: QueueQuota, fl: GpuFlavor) -> Preemption | None:
        """Stop the fewest, least important jobs that let ``j`` run on ``fl``; ``None`` (and
        nothing changed) when no allowed set of victims makes room."""
        if not self.may_preempt_at_all(q):
            return None
        cands = self.candidates(j, q, fl)
        if not cands:
            return None
        borrow = True
        if self.fair:
            chosen = self._fair(j, q, fl, cands)
        else:
            book = self.book
            key = book.key(q, fl)
            own = [v for v in cands if book.queue_of(v.spec.queue) is q]
            if len(own) == len(cands) or book.used(q.name, key) >= book.nominal(q.name, key):
                # nobody else's, or the queue is not below its nominal quota (then it may not
                # reclaim, Kueue's rule against borrowing within the cohort): its own jobs
                chosen = self._minimal(j, q, fl, own, borrow=True)
            else:  # reclaim only to fit within nominal quota, else own jobs and borrow
                chosen = self._minimal(j, q, fl, cands, borrow=False)
                borrow = not chosen
                if not chosen:
                    chosen = self._minimal(j, q, fl, own, borrow=True)
        if not chosen:
            return None
        kept = self._prune(j, q, fl, chosen, borrow)
        placed = self._fits(j, q, fl, borrow)
        assert placed is not None
        return Preemption(placed, tuple(v.spec.job_id for v in chosen
                                        if v.spec.job_id not in kept))

    def _minimal(self, j: JobView, q: QueueQuota, fl: GpuFlavor, cands: Sequence[JobView],
                 borrow: bool) -> list[JobView]:
        """Victims in order until ``j`` fits (within its nominal quota unless ``borrow``);
        empty, and nothing changed, when it never does. A job of another queue is skipped
        once that queue no longer borrows."""
        book = self.book
        chosen: list[JobView] = []
        for v in cands:
            vq = book.queue_of(v.spec.queue)
            assert vq is not None
            if vq is not q and not book.borrowing(vq.name, book.key(vq, fl)):
                continue  # no longer borrows: the rest of its quota is its own
            self._stop(v, -1)
            chosen.append(v)
            if self._fits(j, q, fl, borrow) is not None:
                return chosen
        for v in reversed(chosen):
            self._stop(v, +1)
        return []

    def _fair(self, j: JobView, q: QueueQuota, fl: GpuFlavor,
              cands: Sequence[JobView]) -> list[JobView]:
        """Kueue's fair-sharing preemption: take victims from the queue with the highest
        share first (the preemptor's own queue too, whose jobs need no strategy); a victim
        of another queue must pass the first strategy, and with a second strategy
        (``LessThanInitialShare``) the jobs that failed get one more pass, a queue at a time.
        Empty, and nothing changed, when ``j`` never fits."""
        book = self.book
        key = book.key(q, fl)
        n = j.spec.num_gpus
        left: dict[str, list[JobView]] = {}
        queue_of: dict[str, QueueQuota] = {}
        for v in cands:  # (in victim order: lowest priority, newest first)
            vq = book.queue_of(v.spec.queue)
            assert vq is not None
            left.setdefault(vq.name, []).append(v)
            queue_of[vq.name] = vq
        first = self.strategies[0]
        chosen: list[JobView] = []
        retry: dict[str, list[JobView]] = {}

        def share_of(name: str) -> float:
            vq = queue_of[name]
            return book.share(vq, extra=(key, n)) if vq is q else book.share(vq)

        def take(v: JobView) -> bool:
            self._stop(v, -1)
            chosen.append(v)
            return self._fits(j, q, fl, borrow=True) is not None

        for name in _highest(left, share_of):
            jobs = left[name]
            if queue_of[name] is q:
                if take(jobs.pop(0)):
                    return chosen
                if not jobs:
                    del left[name]
                continue
            vq = queue_of[name]
            mine, theirs = book.share(q, extra=(key, n)), book.share(vq)
            while jobs:
                v = jobs.pop(0)
                assert v.placement is not None
                after = book.share(vq, less=book.charges(vq, v.placement))
                if _passes(first, mine, theirs, after):
                    if take(v):
                        return chosen
                    break  # shares changed: pick the queue again
                retry.setdefault(name, []).append(v)
            if not jobs:
                del left[name]
        if len(self.strategies) > 1:
            second = self.strategies[1]
            for name in _highest(retry, share_of):
                vq = queue_of[name]
                mine, theirs = book.share(q, extra=(key, n)), book.share(vq)
                v = retry.pop(name)[0]
                assert v.placement is not None
                after = book.share(vq, less=book.charges(vq, v.placement))
                if _passes(second, mine, theirs, after) and take(v):
                    return chosen
        for v in reversed(chosen):
            self._stop(v, +1)
        return []

    def _prune(self, j: JobView, q: QueueQuota, fl: GpuFlavor,
               chosen: Sequence[JobView], borrow: bool) -> set[JobId]:
        """Give back, newest choice excepted and latest first, each victim the job does not
        need."""
        kept: set[JobId] = set()
        for v in reversed(chosen[:-1]):
            p = self.run[v.spec.job_id]
            if not self.free.can_take(p):
                continue
            self._stop(v, +1)
            if self._fits(j, q, fl, borrow) is not None:
                kept.add(v.spec.job_id)
            else:
                self._stop(v, -1)
        return kept


def _passes(strategy: FairPreemption, mine: float, theirs: float, after: float) -> bool:
    """Kueue's strategies: the preemptor's share with the job admitted (``mine``) against
    the target queue's share before (``theirs``) and after (``after``) the preemption."""
    if strategy is FairPreemption.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return mine <= after
    return mine < theirs


def _highest(pool: dict[str, list[JobView]], share_of: Callable[[str], float]) -> Iterator[str]:
    """The queues of ``pool`` by highest share first (ties: by name), re-evaluated after each
    step while the caller empties ``pool``. Shares only fall as victims are stopped, so a
    queue whose share fell since it was queued is queued again at its new share."""
    heap = [(-share_of(m), m) for m in pool]
    heapq.heapify(heap)
    while heap:
        neg, name = heapq.heappop(heap)
        if name not in pool:
            continue
        now = share_of(name)
        if now < -neg:
            heapq.heappush(heap, (-now, name))
            continue
        yield name
        if name in pool:
            heapq.heappush(heap, (-share_of(name), name))
