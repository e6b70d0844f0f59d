"""The transitions the service makes when something happens to a run, as small functions.

Each function takes an open store transaction, re-reads the job inside it (the API thread may
have changed it meanwhile, e.g. a cancel) and walks the lifecycle table:

* a run **exits 0** → SUCCEEDED (a job that says it is done is done, even if it was asked to
  stop: it may have finished inside its grace period);
* a run that was **asked to stop for preemption** exits non-zero → PREEMPTED → PENDING (it
  resumes later from its checkpoint directory; no retry is charged); a run **asked to stop for
  a move** does the same and, its next run being planned already, goes on to ADMITTED;
* a run stopped for **exceeding its max_runtime_s** exits non-zero → FAILED, final at once: a
  runtime limit is a verdict on the job, not a mishap (Slurm's TIMEOUT), so it is not retried;
* any other non-zero exit, a **lost** run (runner or actor vanished) or a command that could
  not start (``exec failed: ...``) → FAILED, and back to PENDING while
  ``attempts <= max_retries``; otherwise FAILED is final.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

from tessera.live.executors.base import RunStatus
from tessera.live.sharing import relabel_run
from tessera.live.speeds import RunSpeeds
from tessera.live.store import Allocation, Store
from tessera.live.where import describe
from tessera.model.jobs import JobState


def mark_running(store: Store, db: sqlite3.Connection, a: Allocation, now_s: float,
                 detail: str, speeds: RunSpeeds) -> None:
    """A planned run is confirmed started: allocation running, job ADMITTED → RUNNING; a run
    that joins a partner's GPUs slows that partner from now (``speeds``)."""
    rec = store.get(a.job_id)
    cur = store.allocation(a.job_id, a.run)
    if rec is None or cur is None:
        return
    if cur.status == "planned":
        store.set_allocation(db, a.job_id, a.run, status="running", started_s=now_s)
    elif cur.started_s is None:  # cancelled while it was being launched: still record the start
        store.set_allocation(db, a.job_id, a.run, started_s=now_s)
    if cur.started_s is None:
        started = store.allocation(a.job_id, a.run)
        assert started is not None
        speeds.joined(store, db, started, now_s)
    if rec.state is JobState.ADMITTED:
        first = rec.first_start_s if rec.first_start_s is not None else now_s
        store.transition(db, a.job_id, JobState.RUNNING, now_s, detail, first_start_s=first)


def finish_run(store: Store, db: sqlite3.Connection, a: Allocation, st: RunStatus,
               now_s: float, speeds: RunSpeeds) -> str:
    """Record that run ``a`` ended with ``st`` and move its job on; returns what happened.
    The run's steps (at the speeds it ran, ``speeds``) join the job's; a partner that shared
    its GPUs runs alone from now, and its label drops the job that left."""
    rec = store.get(a.job_id)
    assert rec is not None
    steps, mate = speeds.ended(store, db, a, now_s)
    steps_done = speeds.done_before(rec) + steps
    if mate is not None and a.job_id in mate.placement.colocated_with:
        # The partner stays and runs alone from now: its label says so at once (the policy
        # sees it alone, as the simulator shows it), with an event on its job.
        left = tuple(m for m in mate.placement.colocated_with if m != a.job_id)
        relabel_run(store, db, mate, replace(mate.placement, colocated_with=left), now_s)
    started = a.started_s if a.started_s is not None else now_s
    dur_s = max(now_s - started, 0.0)
    run_s = dict(rec.run_s_by_flavor)
    g = a.placement.num_gpus
    for f, n in a.placement.flavor_counts():  # a mixed gang: each flavor by its share
        run_s[f] = run_s.get(f, 0.0) + (dur_s if n == g else dur_s * n / g)
    detail = st.detail or ("lost" if st.state == "lost" else f"exit {st.exit_code}")
    store.set_allocation(db, a.job_id, a.run, status="done", ended_s=now_s,
                         exit_code=st.exit_code, detail=detail)
    run_s_json = json.dumps({f.short: s for f, s in run_s.items()})  # (the store keeps names)
    store.update_job(db, a.job_id, last_run_end_s=now_s, run_s_json=run_s_json,
                     attained_gpu_s=rec.attained_gpu_s + dur_s * a.placement.num_gpus,
                     exit_code=st.exit_code, steps_done=steps_done)
    state = rec.state
    if rec.final or state not in (JobState.ADMITTED, JobState.RUNNING):
        store.event(db, now_s, a.job_id, "run-ended", f"run {a.run}: {detail}")
        return "released"
    if state is JobState.ADMITTED:
        store.transition(db, a.job_id, JobState.RUNNING, now_s, f"run {a.run} adopted")
    if st.state == "exited" and st.exit_code == 0:
        store.transition(db, a.job_id, JobState.SUCCEEDED, now_s, f"run {a.run} exited 0",
                         final=1, finish_s=now_s, reason="")
        withdraw_planned(store, db, a.job_id, now_s, "the job finished")
        return "succeeded"
    if a.stop_reason in ("preempt", "move") and st.stopped:
        store.transition(db, a.job_id, JobState.PREEMPTED, now_s, f"run {a.run}: {detail}")
        store.transition(db, a.job_id, JobState.PENDING, now_s, "requeued with its checkpoint",
                         pending_since_s=now_s)
        nxt = store.allocations(("planned",), job_id=a.job_id)
        if not nxt:
            return "preempted"
        store.transition(db, a.job_id, JobState.ADMITTED, now_s,
                         f"run {nxt[0].run} on {describe(nxt[0].placement)}", reason="")
        return "moved"
    withdraw_planned(store, db, a.job_id, now_s, f"run {a.run} ended: {detail}")
    attempts = rec.attempts + 1
    store.transition(db, a.job_id, JobState.FAILED, now_s, f"run {a.run}: {detail}",
                     attempts=attempts)
    if st.timed_out:
        store.update_job(db, a.job_id, final=1, finish_s=now_s,
                         reason=f"{detail} (a runtime limit is not retried)")
        return "timed out"
    if attempts <= rec.job.spec.max_retries:
        store.transition(db, a.job_id, JobState.PENDING, now_s,
                         f"retry {attempts} of {rec.job.spec.max_retries}",
                         pending_since_s=now_s)
        return "retrying"
    store.update_job(db, a.job_id, final=1, finish_s=now_s,
                     reason=f"failed after {attempts} run(s): {detail}")
    return "failed"


def withdraw_planned(store: Store, db: sqlite3.Connection, job_id: str, now_s: float,
                     why: str) -> int:
    """Withdraw the job's planned runs that were never launched; returns how many."""
    planned = store.allocations(("planned",), job_id=job_id)
    for a in planned:
        store.set_allocation(db, job_id, a.run, status="done", ended_s=now_s,
                             detail=f"withdrawn before launch: {why}")
        store.event(db, now_s, job_id, "withdrawn", f"run {a.run}: {why}")
    return len(planned)


def cancel_job(store: Store, db: sqlite3.Connection, job_id: str, now_s: float,
               who: str) -> JobState:
    """Cancel a job; a running gang keeps its GPUs until its processes have exited.

    Returns:
        the state the job was in.

    Raises:
        ValueError: the job already finished.
    """
    rec = store.get(job_id)
    assert rec is not None
    if rec.final:
        raise ValueError(f"job {job_id} already finished ({rec.state.value})")
    store.transition(db, job_id, JobState.CANCELLED, now_s, f"cancelled by {who}",
                     final=1, finish_s=now_s, reason=f"cancelled by {who}")
    for a in store.allocations(("planned", "running"), job_id=job_id):
        store.set_allocation(db, job_id, a.run, status="stopping", stop_reason="cancel")
    return rec.state
