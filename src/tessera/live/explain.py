"""``tessera explain``: why a job waits, and where it would go.

The answer reuses the decision core rather than re-implementing it: the last round's reason
for the job, plus two what-if rounds over pure snapshots --

* **now**: the running gangs as they are, and this job as the only one waiting: does it fit
  in what is free right now (so only higher-ranked jobs stand in its way)?
* **empty cluster**: this job alone: where would it go once the cluster drains?

The what-if rounds run on API threads, so each runs on its own fork of the service's decision
context (a fresh oracle and random stream): they never touch the loop's caches or its random
stream, and they place with the service's own settings (locality wait, mixed gangs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tessera.live.store import HOLDING, JobRecord
from tessera.live.view import build_snapshot, queue_usage
from tessera.model.jobs import JobState
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.snapshot import Snapshot

if TYPE_CHECKING:
    from tessera.live.service import LiveService


def explain(svc: LiveService, rec: JobRecord) -> dict[str, Any]:
    """A JSON-able explanation of one job (see the module docstring)."""
    spec = rec.job.spec
    ctx = svc.ctx.fork()
    out: dict[str, Any] = {"job_id": rec.job_id, "name": rec.job.name, "state": rec.state.value,
                           "queue": rec.queue, "gpus": spec.num_gpus,
                           "flavors": [f.short for f in spec.flavors] or ["any"], "lines": []}
    lines: list[str] = out["lines"]
    allocs = svc.store.allocations(HOLDING, job_id=rec.job_id)
    if rec.final:
        lines.append(f"finished: {rec.state.value}" + (f" ({rec.reason})" if rec.reason else ""))
        return out
    if allocs:
        a = allocs[-1]
        lines.append(f"run {a.run} is {a.status} on {a.placement.describe()}")
        rate = ctx.oracle.placement_rate(spec, a.placement)
        lines.append(f"speed on {a.placement.flavor}: {rate:g} steps/s")
        out["placement"] = a.placement.describe()
        return out
    now = svc.clock()
    lines.append("waiting: " + (rec.reason or "not yet considered by a decision round"))
    holding = svc.store.allocations(HOLDING)
    q = svc.tenancy.quotas.get(rec.queue)
    if q is not None:
        used = queue_usage(holding, {j.job_id: j.queue for j in svc.store.jobs(True)})
        borrow = "unlimited" if q.borrowing_limit_gpus is None else q.borrowing_limit_gpus
        lines.append(f"queue {q.name}: {used.get(q.name, 0)} of {q.nominal_gpus} nominal GPUs in "
                     f"use, borrowing limit {borrow}")
    rates = ctx.oracle.real_rates(spec)
    lines.append("allowed flavors here: " + (", ".join(
        f"{r.flavor} ({r.consolidated:g} steps/s)" for r in rates) or "none"))
    running = [r for r in svc.store.jobs(active_only=True)
               if r.state in (JobState.ADMITTED, JobState.RUNNING)]
    pending_me = replace(rec, state=JobState.PENDING)
    snap = build_snapshot(now, svc.cluster, [*running, pending_me], holding,
                          svc.tenancy.quotas, ctx.oracle, None)
    now_place = _where(snap, svc, ctx, rec.job_id)
    out["would_fit_now"] = now_place
    if now_place:
        lines.append(f"fits in the GPUs free now: {now_place}; it starts when no higher-ranked "
                     "job claims them")
    else:
        lines.append("does not fit in the GPUs free now")
    alone = Snapshot(now_s=now, cluster=svc.cluster, jobs=tuple(
        v for v in snap.jobs if v.job_id == rec.job_id))
    out["would_go_when_empty"] = _where(alone, svc, ctx, rec.job_id)
    lines.append(f"on an empty cluster it would run on {out['would_go_when_empty'] or 'nothing'}")
    return out


def _where(snap: Snapshot, svc: LiveService, ctx: DecisionContext, job_id: str) -> str | None:
    d = decide(snap, make_policy("fifo"), ctx, svc.placement)
    p = d.placements.get(job_id)  # type: ignore[call-overload]
    return p.describe() if p is not None else None
