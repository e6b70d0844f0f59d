"""Step 3 of the loop: write a decision -- allocations, transitions, events -- in one commit.

A run is launched (step 4, :mod:`~tessera.live.launches`) only after its allocation row
exists, so a crash between the two leaves a row the restarted service finds
(:mod:`~tessera.live.reconcile`). What a decision does to each job:

* **preempted**: its run is asked to stop (``stopping``, reason ``preempt``); a planned run that
  never launched is withdrawn, and an admitted job goes back to PENDING;
* **started**, while PENDING: a new run is planned (``planned``), the job is ADMITTED;
* **started**, while RUNNING or ADMITTED elsewhere: a move (a resize when the size or batch
  changes): the current run stops with its checkpoint and the next is planned at once; it
  launches as soon as the GPUs it needs have drained;
* **started** onto the same GPUs with another partner (a packing policy): the allocation is
  relabelled in place, nothing restarts (:mod:`~tessera.live.sharing`).

The policy's new memory, when it changed, is saved in the same commit
(:mod:`~tessera.live.memory`); the pending jobs' reasons are written after it.
"""

from __future__ import annotations

import logging
import sqlite3

from tessera.live import lifecycle, memory
from tessera.live.loop_parts import ServiceParts
from tessera.live.reason_scope import scoped_reasons
from tessera.live.resize import RESIZED, out_of_range, size_change
from tessera.live.sharing import relabel_run, relabels
from tessera.live.store import HOLDING, Allocation
from tessera.live.where import describe
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.decide import Decision
from tessera.sched.core.quota_round import QUOTA_PREEMPTION

log = logging.getLogger("tessera.live")


def journal(svc: ServiceParts, d: Decision, now_s: float, remember: bool = False) -> None:
    """Write the decision; with ``remember``, the policy's new memory in the same commit."""
    current: dict[str, Allocation] = {}
    relabel: set[JobId] = set()
    if svc.policy.packs:  # a partner coming or going is no restart (live.sharing)
        current = {a.job_id: a for a in svc.store.allocations(("planned", "running"))}
        relabel = set(relabels(d.started, d.placements, current))
    with svc.store.tx() as db:
        if remember:
            memory.save(db, svc.policy.display_name, d.policy_state, now_s)
        if svc.policy.packs and (d.started or d.preempted):
            # Relabels, stops and joins below change who shares with whom from now on:
            # bank every run's steps at the speed of the pairs as they were (live.speeds).
            svc.speeds.settle_all(svc.store, db, now_s, {*d.started, *d.preempted})
        for jid in d.preempted:
            note = d.notes.get(jid, "")
            why = note if note.startswith(QUOTA_PREEMPTION) else "preempted by the policy"
            request_stop(svc, db, jid, now_s, why, "preempt")
        for jid in d.started:
            rec = svc.store.get(jid)
            if rec is None or rec.final:
                continue
            p = d.placements[jid]
            if jid in relabel:
                relabel_run(svc.store, db, current[jid], p, now_s)
                continue
            bad = out_of_range(rec.job, p)
            if bad is not None:  # a policy bug; the job keeps what it has
                log.warning("job %s: decision ignored: %s", jid, bad)
                svc.store.event(db, now_s, jid, "placement-refused", bad)
                continue
            change = None
            if rec.state in (JobState.RUNNING, JobState.ADMITTED):
                # A move (a resize when the size or batch changes): the current run stops
                # with its checkpoint and the next one is planned now; it launches as soon
                # as the GPUs it needs have drained.
                held = svc.store.allocations(HOLDING, job_id=jid)
                change = size_change(rec.job, held[-1].placement, p) if held else None
                why = f"resizing ({change.describe()})" if change else "moving"
                request_stop(svc, db, jid, now_s, f"{why} to {describe(p)}", "move")
                rec = svc.store.get(jid)
                assert rec is not None
            run = rec.runs + 1
            svc.store.add_allocation(db, jid, run, p, now_s)
            what = f"run {run} on {describe(p)}"
            if change is not None:
                svc.store.event(db, now_s, jid, RESIZED,
                                 f"run {run}: {change.describe()} on {describe(p)}")
            if rec.state is JobState.PENDING:
                svc.store.transition(db, jid, JobState.ADMITTED, now_s, what, runs=run,
                                      reason="")
            else:  # still RUNNING while its old run drains; ADMITTED once that run ends
                svc.store.update_job(db, jid, runs=run)
                svc.store.event(db, now_s, jid, "move-planned", what)
        if d.started or d.preempted:
            svc.store.event(db, now_s, None, "decision",
                             f"{svc.policy.display_name}: started {len(d.started)}, "
                             f"preempted {len(d.preempted)}, pending {len(d.pending)}")
    svc.store.set_reasons(scoped_reasons(  # (no other queue's use unless tenants see all)
        d.pending, lambda jid: getattr(svc.store.get(jid), "queue", None),
        svc.tenancy.tenants_see_all))

def request_stop(svc: ServiceParts, db: sqlite3.Connection, job_id: JobId, now_s: float, why: str,
                  reason: str) -> None:
    """Ask the job's run to stop (``reason``: preempt or move); a planned run that was
    never launched is withdrawn instead, and an admitted job goes back to PENDING."""
    if lifecycle.withdraw_planned(svc.store, db, job_id, now_s, why):
        rec = svc.store.get(job_id)
        if rec is not None and rec.state is JobState.ADMITTED:
            svc.store.transition(db, job_id, JobState.PENDING, now_s,
                                  f"plan withdrawn: {why}", pending_since_s=now_s)
    for a in svc.store.allocations(("running",), job_id=job_id):
        svc.store.set_allocation(db, job_id, a.run, status="stopping", stop_reason=reason)
        svc.store.event(db, now_s, job_id, "stop-requested", f"run {a.run}: {why}")
