"""A job held for a fast board does not block the queue behind it (issue 34, part 3a).

``--power-fast-boards`` (:mod:`~tessera.sched.core.power_displace`) holds a start that the
round placed on a far slower board, so a fast board a running job frees soon can take it.
The budget stage runs after placement, so the slow GPUs the held job was given would stay
idle until the next event: every job behind it that could have used them would wait too. In
the goal run where the rule hurt most (3 jobs/h FIFO, seed 2; ``docs/energy.md``, "Why seed
2 lost") the jobs that were not held lost +2,507 h of JCT to the holds, almost all of it
queueing.

**The refill.** The budget stage's first step (``budget_stage(..., fast_only=True)``: does
the budget bind, and which starts wait for fast boards) runs on the round; if it holds jobs,
the round is placed again without them, by the round's own ranking (the policy is not asked
again), and the stage runs once more, rule off, on the result -- so the budget holds at every
event as before, and the jobs queued behind take the held jobs' GPUs or are capped:

* **event-driven policies** (FIFO, LAS, SRTF, ...; :func:`_replaced`): placed from scratch as
  ``decide`` places them -- the waiting jobs backfilled in rank order (a non-preemptive
  policy's placements ranked before the first held job replayed, not searched again:
  :func:`_replayed`), or, for a preemptive policy whose waiting jobs do not all fit, every
  job by ``place_events``;
* **round-based policies** (max-min fairness, ...; :func:`_refilled`): the round's
  placements stay, less the held jobs', and the jobs it left waiting are backfilled in rank
  order onto the GPUs left free, the held jobs' among them.

Nothing else runs twice: the waiting jobs keep the round's reasons, the policy's memory,
notes and wake-up are the round's, and the placed jobs' remaining times
(:func:`~tessera.sched.core.power_weights.remaining_by_job`) are read once, for the holds
and the weights. At 2,048 jobs a round that holds costs the default's decision plus the
holds, a free-GPU map, one backfill and a second power sum: about 2.0× the plain decision
for FIFO, 1.7× for LAS, 1.4× for max-min fairness, against 2.3-3.9× when the round was
decided again (:func:`redecided`, the refill before; ``docs/energy.md``, "The refill,
cheap").

**What may differ from deciding the round again without the held jobs.** (a) The ranking is
the round's less the held jobs: the same as a new one for policies that rank each job by its
own key (FIFO, LAS, SRTF), not for policies whose shares depend on who is there (max-min
fairness). (b) For round-based policies the jobs the round placed keep their GPUs, where a
second round could give a job ranked after a held one the held job's GPUs and its own to
another; and a running job the round preempted stays preempted unless the backfill gives it
its own GPUs back. (c) The reasons of jobs still waiting are the round's -- free counts from
before the refill, rank positions that count the held jobs (who are still ahead in line);
a job the round placed that no longer fits gets a new reason (without a mixed gang's
planner message), and a gang whose *kind* the refill's free GPUs change (``CAPACITY`` ↔
``FRAGMENTATION``: the simulator reads it) is explained again
(:func:`~tessera.sched.core.refill_reasons.rekinded`). (d) The policy's memory, notes and
wake-up time are the round's, which
ranked the held jobs too. Placements, starts, preemptions and power limits are otherwise the
same; ``tests/sched/test_power_refill.py`` checks them equal to :func:`redecided`'s on the
displacement tests and 60 random FIFO and LAS snapshots, and for max-min fairness that the
budget holds and no GPU is given twice (it may run a few more or fewer jobs than deciding
again: 13 fewer and 15 more of 369 holding rounds, ``docs/energy.md``).

Rounds the refill does not model are decided again in full (:func:`redecided`): quotas or a
tenancy round (a held job's quota share changes who is admitted), elastic sizes, packing,
CPU and memory modes, a preemptive event-driven round with room for every job (it would move
running gangs to faster GPUs, which the stay-put memory decides), or no ranking on the
decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, TypeVar

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.options import PlacementOptions, needs_locality
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.policy import Policy, Ranking
from tessera.sched.core.power_budget import Levels, budget_stage, held_reason
from tessera.sched.core.power_weights import power_weights, remaining_by_job
from tessera.sched.core.quota_round import needs_tenancy_round
from tessera.sched.core.reasons import (
    CarbonHeld,
    PendingKind,
    PendingReason,
    PowerHeld,
    pending_reasons,
)
from tessera.sched.core.refill_reasons import rekinded
from tessera.sched.core.snapshot import Placement, Snapshot
from tessera.sched.core.strategies import Releases, backfill, place_events

__all__ = ["Refill", "fast_held", "redecided", "refill"]


class _Round(Protocol):
    """What the refill reads of a decision (a frozen dataclass: ``replace`` builds the next)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def placements(self) -> Mapping[JobId, Placement]: ...
    @property
    def started(self) -> tuple[JobId, ...]: ...
    @property
    def preempted(self) -> tuple[JobId, ...]: ...
    @property
    def pending(self) -> Mapping[JobId, PendingReason]: ...
    @property
    def phase_ms(self) -> tuple[tuple[str, float], ...]: ...
    @property
    def ranking(self) -> Ranking | None: ...


R = TypeVar("R", bound=_Round)

@dataclass(frozen=True)
class Refill:
    """What :func:`refill` needs of the round's driver (``decide`` passes its own)."""

    policy: Policy
    ctx: DecisionContext
    memo: Levels
    stage: Callable[..., Any]
    """``decide.within_budget``: (snapshot, decision, budget, oracle, memo, weights or
    ``None`` to compute them, ``fast_only``) -> decision."""
    redecide: Callable[[Snapshot, PlacementOptions], Any]
    """The whole round over a snapshot with options (for :func:`redecided`)."""


_WAITING = (PendingKind.CAPACITY, PendingKind.FRAGMENTATION)


def fast_held(pending: Mapping[JobId, PendingReason]) -> frozenset[JobId]:
    """The jobs of ``pending`` that wait for a faster board (``--power-fast-boards``)."""
    return frozenset(jid for jid, why in pending.items()
                     if isinstance(why.detail, PowerHeld) and why.detail.for_fast_board)


def refill(snapshot: Snapshot, d: R, opts: PlacementOptions, how: Refill) -> R:
    """Phase 6 for ``d`` (the round before its power budget): the budget stage, and with
    ``wait_for_fast`` the holds for fast boards, the refill and the stage again (see the
    module docstring). ``opts`` are the round's, ``largest_node_gpus`` filled in as
    ``decide`` does (a gang's locality wait reads it)."""
    budget, oracle = opts.power_budget, how.ctx.oracle
    assert budget is not None
    if not budget.wait_for_fast:
        out: R = how.stage(snapshot, d, budget, oracle, how.memo, None, False)
        return out
    d = replace(d, placements=dict(d.placements))  # (read thrice below: copied once)
    t0 = time.perf_counter()
    left = remaining_by_job(snapshot, d.placements, oracle)  # (the rule's and the weights')
    holds = budget_stage(snapshot, d.placements, d.started, budget, how.memo, None, oracle,
                         fast_only=True, remaining=left)
    off = replace(budget, wait_for_fast=False)
    first_ms = (time.perf_counter() - t0) * 1e3
    if not holds.for_fast:  # the stage as without the rule (nothing to hold)
        weights = power_weights(snapshot, d.placements, oracle, bool(d.pending), left)
        done: R = how.stage(snapshot, d, off, oracle, how.memo, weights, False)
        return done
    jobs = {j.spec.job_id: j for j in snapshot.jobs if j.spec.job_id in holds.for_fast}
    held = {jid: held_reason(budget, holds.power_w, jobs[jid], True) for jid in holds.for_fast}
    off_opts = replace(opts, power_budget=off)
    got = (None if not _modelled(snapshot, d, how.policy)
           else _refilled(snapshot, d, frozenset(held), off_opts, how)
           if how.policy.round_based else _replaced(snapshot, d, frozenset(held), off_opts, how))
    if got is None:
        return redecided(snapshot, held, off_opts, how.redecide)
    same = {jid: s for jid, s in left.items() if got.placements.get(jid) is d.placements[jid]}
    weights = power_weights(snapshot, got.placements, oracle, bool(got.pending), same)
    refill_ms = (time.perf_counter() - t0) * 1e3 - first_ms
    final: R = how.stage(snapshot, got, off, oracle, how.memo, weights, False)
    return replace(final, pending={**final.pending, **held},
                   phase_ms=(*d.phase_ms, ("power", first_ms + final.phase_ms[-1][1]),
                             ("refill", refill_ms)))


def redecided(snapshot: Snapshot, held: Mapping[JobId, PendingReason], off: PlacementOptions,
              redecide: Callable[[Snapshot, PlacementOptions], R]) -> R:
    """The round decided again by ``redecide`` without the ``held`` jobs, with ``off`` (the
    rule off); the held jobs pending with their reasons."""
    view = snapshot.with_jobs(tuple(j for j in snapshot.jobs if j.spec.job_id not in held))
    again: R = redecide(view, off)
    return replace(again, pending={**again.pending, **held})


def _modelled(snapshot: Snapshot, d: _Round, policy: Policy) -> bool:
    """Whether :func:`_refilled` models this round (else it is decided again in full)."""
    r = d.ranking
    return (r is not None and not r.sizes and not r.colocate and not policy.packs
            and policy.host_mode is None and not snapshot.queue_quotas()
            and not needs_tenancy_round(snapshot.tenancy))


def _replaced(snapshot: Snapshot, d: R, held: frozenset[JobId], opts: PlacementOptions,
               how: Refill) -> R | None:
    """An event-driven round placed again from scratch by its own ranking less the ``held``
    jobs, as ``decide`` places it: the waiting jobs backfilled (``_waiting_first``), or for
    a preemptive policy whose waiting jobs do not all fit, every job by ``place_events``
    (``_full_round``). ``None`` where the round would move running gangs to faster GPUs
    (a preemptive policy with room for everyone): :func:`redecided` answers."""
    ranking, policy, now_s = d.ranking, how.policy, snapshot.now_s
    assert ranking is not None
    oracle = how.ctx.oracle.as_agnostic() if policy.agnostic else how.ctx.oracle
    layout = how.ctx.layout(snapshot.cluster)
    cands = ranking.candidates  # (the held jobs are in none of the maps below: skipped)
    split = snapshot.split()
    waiting = {j.spec.job_id: j for j in split.waiting}
    for jid in held:
        waiting.pop(jid, None)
    free = FreeGpus.of_snapshot(snapshot, layout)
    replay = not policy.preemptive and not opts.mixed_gangs  # (the round's was this backfill)
    new = _replayed(cands, held, d, free) if replay else {}
    backfill(cands, waiting, new, free, oracle, now_s, opts, Releases(snapshot.jobs, now_s))
    if policy.preemptive and len(new) == len(waiting):
        return None
    if not policy.preemptive:
        first_new = set(d.started)  # (the round's starts: the others are running gangs)
        placements = {k: p for k, p in d.placements.items() if k not in first_new} | new
        started, preempted = tuple(new), tuple[JobId, ...]()
        pending = {k: why for k, why in d.pending.items() if k not in new}
        fresh = [waiting[k] for k in d.started if k in waiting and k not in new]
    else:  # as _full_round: everyone ranked, lower-ranked gangs may give way
        jobs = [j for j in snapshot.jobs if j.spec.job_id not in held]
        by_id = {j.spec.job_id: j for j in jobs}
        free = FreeGpus.of_snapshot(snapshot, layout)
        cands = tuple([c for c in cands if c[0] not in held])
        placements = place_events(cands, by_id, jobs, free, oracle, True, now_s, opts)
        if len(placements) == len(by_id):
            return None
        started = tuple(jid for jid, p in placements.items()
                        if by_id[jid].placement is not p
                        and (not by_id[jid].running or by_id[jid].placement != p))
        preempted = tuple(j.spec.job_id for j in split.running if j.spec.job_id not in placements)
        left = [j for j in jobs if j.spec.job_id not in placements]
        pending = {j.spec.job_id: why for j in left if (why := d.pending.get(j.spec.job_id))}
        fresh = [j for j in left if j.spec.job_id not in pending]
    pending.update(rekinded(pending, snapshot, free, cands, how.ctx.oracle, now_s, opts))
    if fresh:  # placed by the round, not now: a reason of their own
        pending.update(pending_reasons(
            fresh, cands, how.ctx.oracle, free,
            {j.spec.job_id: needs_locality(j, now_s, opts) for j in fresh}))
    return replace(d, placements=placements, started=started, preempted=preempted,
                   pending=pending)


def _replayed(cands: tuple[tuple[JobId, GpuFlavor], ...], held: frozenset[JobId], d: _Round,
              free: FreeGpus) -> dict[JobId, Placement]:
    """The round's new placements of the jobs ranked before the first held one, taken from
    ``free``: a backfill from scratch places them the same way (the same jobs see the same
    free GPUs until the first held job's turn), so they are replayed instead of searched."""
    started = set(d.started)
    out: dict[JobId, Placement] = {}
    for jid, _fl in cands:
        if jid in held:
            break
        if jid in started and jid not in out:
            p = d.placements[jid]
            free.take(p)
            out[jid] = p
    return out


def _refilled(snapshot: Snapshot, d: R, held: frozenset[JobId], opts: PlacementOptions,
              how: Refill) -> R:
    """A round-based round: ``d`` less the ``held`` jobs, its waiting jobs backfilled onto
    the GPUs left free in its ranking's order; and the placements new in the refill."""
    ranking = d.ranking
    assert ranking is not None
    by_id = {j.spec.job_id: j for j in snapshot.jobs}
    free = FreeGpus.of_snapshot(snapshot, how.ctx.layout(snapshot.cluster))
    for jid in (*d.preempted, *d.started):  # GPUs the round freed: stopped or moved gangs
        p = by_id[jid].placement
        if by_id[jid].running and p is not None:
            free.release(p)
    for jid in d.started:
        if jid not in held:
            free.take(d.placements[jid])
    waiting = {jid: by_id[jid] for jid, why in d.pending.items()
               if why.kind in _WAITING and not isinstance(why.detail, (PowerHeld, CarbonHeld))}
    new: dict[JobId, Placement] = {}
    if waiting:
        oracle = how.ctx.oracle.as_agnostic() if how.policy.agnostic else how.ctx.oracle
        backfill(tuple(c for c in ranking.candidates if c[0] in waiting), waiting, new, free,
                 oracle, snapshot.now_s, opts, Releases(snapshot.jobs, snapshot.now_s))
    back = {jid for jid, p in new.items() if by_id[jid].running and by_id[jid].placement == p}
    placements = {k: p for k, p in d.placements.items() if k not in held} | new
    started = (*(j for j in d.started if j not in held), *(j for j in new if j not in back))
    if new:  # in the policy's order (the budget stage holds the last-ranked first on ties)
        pos: dict[JobId, int] = {}
        for jid, _fl in ranking.candidates:
            pos.setdefault(jid, len(pos))
        started = tuple(sorted(started, key=lambda j: pos.get(j, len(pos))))
    pending = {k: why for k, why in d.pending.items() if k not in new}
    pending.update(rekinded(pending, snapshot, free, ranking.candidates, how.ctx.oracle,
                            snapshot.now_s, opts))
    return replace(d, placements=placements, started=started,
                   preempted=tuple(j for j in d.preempted if j not in back), pending=pending)
