"""Preemption under a tenancy: who may be stopped for a pending job, and which ones.

Who (Kueue's candidate rules, per the preempting job's queue, :class:`QueuePreemption`):

* **its own queue** (``within_queue``): ``LowerPriority`` -- jobs of lower priority;
  ``LowerOrNewerEqualPriority`` -- also equal-priority jobs submitted later. With
  **time sharing** (the queue's ``min_admitted_s``), an equal-priority job of the queue that
  has run at least ``min_admitted_s`` may be stopped too, so jobs that each want the whole
  quota take turns (Kueue #8522);
* **other queues of its cohort tree** (``reclaim_within_cohort``), only jobs whose queue
  borrows the flavor (uses more than its nominal quota of it): ``LowerPriority`` -- of lower
  priority; ``Any`` -- any. Without fair sharing this is *reclaim*: allowed only when the
  pending job fits within its own queue's nominal quota. With fair sharing, the preempting
  queue may borrow too, but each victim must pass one of the strategies, tried in order:
  ``LessThanOrEqualToFinalShare`` -- the preempting queue's share with the job admitted is at
  most the victim queue's share without the victim; ``LessThanInitialShare`` -- it is below the
  victim queue's share before the preemption.

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.quota_book import Key, QuotaBook
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

    def candidates(self, j: JobView, q: QueueQuota, fl: GpuFlavor, key: Key,
                   within_nominal: bool) -> list[JobView]:
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
            elif ((within_nominal or self.fair) and book.same_tree(q.name, vq.name)
                  and may_reclaim(q, j, v)
                  and book.borrowing(vq.name, book.key(vq, fl))):
                out.append((victim_order(v, False), v))
        out.sort(key=lambda o: o[0])
        return [v for _o, v in out]

    def _fair_ok(self, q: QueueQuota, key: Key, n: int, v: JobView, vq: QueueQuota) -> bool:
        book = self.book
        assert v.placement is not None
        mine = book.share(q, extra=(key, n))
        theirs = book.share(vq)
        after = book.share(vq, less=book.charges(vq, v.placement))
        for s in self.strategies:
            if s is FairPreemption.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE and mine <= after:
                return True
            if s is FairPreemption.LESS_THAN_INITIAL_SHARE and mine < theirs:
                return True
        return False

    def _fits(self, j: JobView, q: QueueQuota, fl: GpuFlavor, key: Key) -> Placement | None:
        n = j.spec.num_gpus
        if not self.book.fits(q.name, key, n) or self.free.total_free(fl) < n:
            return None
        return self.free.find(fl, n, self.local(j))

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
        book = self.book
        key = book.key(q, fl)
        n = j.spec.num_gpus
        within = book.used(q.name, key) + n <= book.nominal(q.name, key)
        cands = self.candidates(j, q, fl, key, within)
        if not cands:
            return None
        chosen: list[JobView] = []
        placed: Placement | None = None
        for v in cands:
            vq = book.queue_of(v.spec.queue)
            assert vq is not None
            if vq.name != q.name:
                if not book.borrowing(vq.name, book.key(vq, fl)):
                    continue  # no longer borrows: the rest of its quota is its own
                if self.fair and not self._fair_ok(q, key, n, v, vq):
                    continue
            self._stop(v, -1)
            chosen.append(v)
            placed = self._fits(j, q, fl, key)
            if placed is not None:
                break
        if placed is None:
            for v in reversed(chosen):
                self._stop(v, +1)
            return None
        kept = self._prune(j, q, fl, key, chosen)
        placed = self._fits(j, q, fl, key)
        assert placed is not None
        return Preemption(placed, tuple(v.spec.job_id for v in chosen if v not in kept))

    def _prune(self, j: JobView, q: QueueQuota, fl: GpuFlavor, key: Key,
               chosen: Sequence[JobView]) -> list[JobView]:
        """Give back, newest choice excepted and latest first, each victim the job does not
        need."""
        kept: list[JobView] = []
        for v in reversed(chosen[:-1]):
            p = self.run[v.spec.job_id]
            if not self.free.can_take(p):
                continue
            self._stop(v, +1)
            if self._fits(j, q, fl, key) is not None:
                kept.append(v)
            else:
                self._stop(v, -1)
        return kept
