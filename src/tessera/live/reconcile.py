"""Restart: make the store and the executor agree before the first decision.

For every allocation that holds GPUs, ask the executor about its run ``(job_id, run)``:

=============  ===============  ==================================================
stored status  executor says    action
=============  ===============  ==================================================
planned        absent           launch it (the crash came before the launch)
planned        running          adopt: mark it running (crash after the launch)
planned        exited / lost    adopt, then record the exit
running        running          adopt (nothing to do; the loop keeps polling it)
running        exited / lost    record the exit (the loop's first observe does it)
stopping       any              re-send the stop; record the exit when it comes
=============  ===============  ==================================================

Launching is idempotent in the executor (a run already claimed is not started again), so even
"planned + absent" when the executor is merely slow to report cannot run a job twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.live import lifecycle

if TYPE_CHECKING:
    from tessera.live.service import LiveService


def reconcile(svc: LiveService) -> dict[str, int]:
    """Adopt what still runs, record what ended while the service was down; returns counts."""
    store, ex = svc.store, svc.executor
    now = svc.clock()
    counts = {"adopted": 0, "to_launch": 0, "ended": 0}
    for a in store.allocations(("planned",)):
        st = ex.status(a.job_id, a.run)
        if st.state == "absent":
            counts["to_launch"] += 1
            continue
        with store.tx() as db:
            lifecycle.mark_running(store, db, a, now, f"run {a.run} adopted after restart")
        counts["adopted"] += 1
    for a in store.allocations(("running", "stopping")):
        st = ex.status(a.job_id, a.run)
        if st.state == "running":
            counts["adopted"] += 1
        else:
            counts["ended"] += 1
    with store.tx() as db:
        store.event(db, now, None, "service-started",
                    f"executor {ex.name}; adopted {counts['adopted']}, "
                    f"launching {counts['to_launch']}, ended while down {counts['ended']}")
    svc.observe(now)
    return counts
