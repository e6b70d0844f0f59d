"""A launched run until it runs: confirm it, or withdraw a plan the executor cannot place.

Launches do not block the loop (:meth:`LiveService.act`): an executor that needs time -- Ray
reserving a placement group, starting one actor per rank -- says ``starting``, and the run's
allocation stays ``planned`` (its GPUs held, nothing else placed on them) until a later look
says how it went:

==============  ===========================================================================
executor says   what the service does
==============  ===========================================================================
starting        look again at the next ``act``
running         allocation ``running``, job RUNNING
exited / lost   the same (the next ``observe`` records the exit)
unplaceable     withdraw the plan: job back to PENDING with the executor's reason (what no
                node offers), **no retry charged**; the job sits out of the scheduler's
                rounds for a backoff (5 s, doubling to 2 min), so a misconfiguration neither
                spins the loop nor delays other jobs
==============  ===========================================================================
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tessera.live import lifecycle
from tessera.live.store import Allocation
from tessera.model.jobs import JobState

if TYPE_CHECKING:
    from tessera.live.service import LiveService

MIN_BACKOFF_S = 5.0
MAX_BACKOFF_S = 120.0
log = logging.getLogger("tessera.live")


def confirm(svc: LiveService, a: Allocation, now_s: float) -> None:
    """Ask the executor about launched run ``a`` and act on the answer (module docstring)."""
    key = (a.job_id, a.run)
    st = svc.executor.status(a.job_id, a.run)
    if st.state in ("starting", "absent"):
        svc._launching.add(key)
        return
    svc._launching.discard(key)
    if st.state != "unplaceable":
        with svc.store.tx() as db:
            lifecycle.mark_running(svc.store, db, a, svc.clock(), f"run {a.run} launched",
                                   svc.speeds)
        svc._backoff.pop(a.job_id, None)
        return
    last_s = svc._backoff.get(a.job_id, (0.0, MIN_BACKOFF_S / 2))[1]
    delay_s = min(2 * last_s, MAX_BACKOFF_S)
    svc._backoff[a.job_id] = (now_s + delay_s, delay_s)
    why = f"{st.detail}; trying again in {delay_s:g} s"
    with svc.store.tx() as db:
        lifecycle.withdraw_planned(svc.store, db, a.job_id, now_s, st.detail)
        rec = svc.store.get(a.job_id)
        if rec is not None and rec.state is JobState.ADMITTED:
            svc.store.transition(db, a.job_id, JobState.PENDING, now_s,
                                 f"run {a.run} not placed: {st.detail}",
                                 pending_since_s=now_s, reason=why)
    svc.executor.release(a.job_id, a.run)
    log.warning("job %s run %s: %s", a.job_id, a.run, why)
    svc.poke()
