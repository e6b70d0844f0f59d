"""Restart: make the store and the executor agree before the first decision.

For every allocation that holds GPUs, ask the executor about its run ``(job_id, run)``:

=============  ===============  ==================================================
stored status  executor says    action
=============  ===============  ==================================================
planned        absent,          launch it (the crash came before the launch, or the
               starting         launch was under way: launching is idempotent)
planned        running          adopt: mark it running (crash after the launch)
planned        exited / lost    adopt, then record the exit
running        running          adopt (nothing to do; the loop keeps polling it)
running        exited / lost    record the exit (the loop's first observe does it)
stopping       any              re-send the stop; record the exit when it comes
=============  ===============  ==================================================

One exception: an executor whose cluster died with the service (``runs_lost_with_cluster``:
the embedded Ray head was gone and had to be started afresh) reports every run ``absent``
through no fault of the jobs; those runs are recorded as **preempted** -- requeued with their
checkpoints, no retry charged -- instead of lost.

Launching is idempotent in the executor (a run already claimed is not started again), so even
"planned + absent" when the executor is merely slow to report cannot run a job twice.

An executor that keeps runs in a cluster beyond the service (Ray: placement groups, exit
records) may offer ``release_unheld(holding)``: it is called once with the runs the store still
holds, and frees what a service killed between recording a run's end and releasing it left.
"""

from __future__ import annotations

from tessera.live import lifecycle
from tessera.live.executors.base import RunStatus
from tessera.live.loop_parts import ServiceParts
from tessera.live.store import HOLDING


def reconcile(svc: ServiceParts) -> dict[str, int]:
    """Adopt what still runs, record what ended while the service was down; returns counts."""
    store, ex = svc.store, svc.executor
    now = svc.clock()
    counts = {"adopted": 0, "to_launch": 0, "ended": 0}
    for a in store.allocations(("planned",)):
        st = ex.status(a.job_id, a.run)
        if st.state in ("absent", "starting", "unplaceable"):
            counts["to_launch"] += 1
            continue
        with store.tx() as db:
            lifecycle.mark_running(store, db, a, now, f"run {a.run} adopted after restart",
                                   svc.speeds)
        counts["adopted"] += 1
    lost_with_cluster = bool(getattr(ex, "runs_lost_with_cluster", False))
    for a in store.allocations(("running", "stopping")):
        st = ex.status(a.job_id, a.run)
        if st.state == "running":
            counts["adopted"] += 1
            continue
        counts["ended"] += 1
        if lost_with_cluster and st.state == "absent":
            _requeue(svc, a.job_id, a.run, now)
    release_unheld = getattr(ex, "release_unheld", None)
    if release_unheld is not None:
        release_unheld({(a.job_id, a.run) for a in store.allocations(HOLDING)})
    with store.tx() as db:
        store.event(db, now, None, "service-started",
                    f"executor {ex.name}; adopted {counts['adopted']}, "
                    f"launching {counts['to_launch']}, ended while down {counts['ended']}")
    svc.observe(now)
    return counts


def _requeue(svc: ServiceParts, job_id: str, run: int, now_s: float) -> None:
    """Record a run its executor lost together with the service as preempted (no retry)."""
    store = svc.store
    with store.tx() as db:
        store.set_allocation(db, job_id, run, status="stopping",
                             stop_reason=None if _final(svc, job_id) else "preempt")
        a = store.allocation(job_id, run)
        assert a is not None
        lifecycle.finish_run(store, db, a, RunStatus(
            "exited", None, True, "the embedded Ray head was gone after the restart; "
            "requeued without a retry"), now_s, svc.speeds)
    svc.executor.release(job_id, run)


def _final(svc: ServiceParts, job_id: str) -> bool:
    rec = svc.store.get(job_id)
    return rec is None or rec.final
