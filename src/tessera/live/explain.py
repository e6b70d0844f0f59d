"""``tessera explain``: why a job waits, and where it would go.

The answer reuses the decision core rather than re-implementing it: the last round's reason
for the job, plus two what-if rounds over pure snapshots --

* **now**: the running gangs as they are, and this job as the only one waiting: would the
  service's policy start it now, in what is free or by preempting a running job? Runs still
  stopping count against their queues' quotas as in the loop's rounds
  (:func:`tessera.live.drain_quota.with_draining`): without them, a job held back by its
  queue's cancelled, draining run was said to fit now.
* **empty cluster**: this job alone: where would it go once the cluster drains?

A waiting job's queue is summed up first: the GPUs it holds of its nominal quota, and -- where
the queue has a ``cpus:``/``memory:`` quota, runs CPU-only jobs, or the job is one -- the CPUs
and memory its CPU-only jobs hold of that quota (:func:`host_quota_line`; the numbers of
``/api/queues``, a stopping run's included).

Both rounds are decided by the service's own policy (with its options and its memory of the
last round) and settings (round length, locality wait, mixed gangs), so the answer is the one
the service would give -- a preemptive policy may start a job a first-come policy would keep
waiting. They run on API threads, so each runs on its own fork of the service's decision
context (a fresh oracle and random stream): they never touch the loop's caches or its random
stream.

Speeds are said as they are known: a job with a model or a profiled job type has its
measured steps/s per flavor; a plain command has none, and the scheduler counts every allowed
flavor alike -- ``explain`` says that rather than print the placeholder rate of 1 step/s.

A tenant sees only its own queue's jobs (``docs/security.md``), and ``explain`` keeps to that:
a job of another queue that the what-if would preempt, or that shares the job's GPUs, is
counted, never named ("preempting 1 job of another queue"; :mod:`tessera.live.names`). The
admin sees every id.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tessera.live.drain_quota import queue_of_holding, with_draining
from tessera.live.names import JobNames
from tessera.live.store import HOLDING, JobRecord
from tessera.live.tenancy import Principal
from tessera.live.view import build_snapshot, cpu_only_usage, queue_usage
from tessera.model.jobs import JobSpec, JobState
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.snapshot import Snapshot

if TYPE_CHECKING:
    from tessera.live.service import LiveService


def explain(svc: LiveService, rec: JobRecord, who: Principal) -> dict[str, Any]:
    """A JSON-able explanation of one job (see the module docstring), as ``who`` may see it:
    other jobs are named only where ``who`` may see their queue."""
    spec = rec.job.spec
    seen = JobNames(svc.store, who, [rec])
    describe = seen.describe  # every placement below is said as ``who`` may read it
    ctx = svc.ctx.fork()
    out: dict[str, Any] = {"job_id": rec.job_id, "name": rec.job.name, "state": rec.state.value,
                           "queue": rec.queue, "gpus": spec.num_gpus,
                           "flavors": [f.short for f in spec.flavors] or ["any"], "lines": []}
    lines: list[str] = out["lines"]
    allocs = svc.store.allocations(HOLDING, job_id=rec.job_id)
    if rec.final:
        lines.append(f"finished: {rec.state.value}" + (f" ({rec.reason})" if rec.reason else ""))
        last = svc.store.allocation(rec.job_id, rec.runs) if rec.runs else None
        if last is not None:
            lines.append(f"run {last.run} ran on {describe(last.placement)}")
        return out
    if allocs:
        a = allocs[-1]
        lines.append(f"run {a.run} is {a.status} on {describe(a.placement)}")
        if measured(svc, spec):
            rate = ctx.oracle.placement_rate(spec, a.placement)
            lines.append(f"speed on {a.placement.label}: {rate:g} steps/s (profile of "
                         f"{spec.job_type})")
        else:
            lines.append(UNMEASURED)
        out["placement"] = describe(a.placement)
        return out
    now = svc.clock()
    lines.append("waiting: " + (rec.reason or "not yet considered by a decision round"))
    holding = svc.store.allocations(HOLDING)
    q = svc.tenancy.quotas.get(rec.queue)
    if q is not None:
        queue_of = queue_of_holding(svc.store, holding)
        used = queue_usage(holding, queue_of)
        borrow = "unlimited" if q.borrowing_limit_gpus is None else q.borrowing_limit_gpus
        lines.append(f"queue {q.name}: {used.get(q.name, 0)} of {q.nominal_gpus} nominal GPUs in "
                     f"use, borrowing limit {borrow}")
        host = cpu_only_usage(holding, queue_of).get(q.name)
        if host is not None or spec.num_gpus == 0 or q.nominal_cpus is not None \
                or q.nominal_mem_gib is not None:
            cpus, mem_gib = host or (0.0, 0.0)
            out["queue_cpu_only"] = {"used_cpus": cpus, "nominal_cpus": q.nominal_cpus,
                                     "used_memory_gib": mem_gib,
                                     "nominal_memory_gib": q.nominal_mem_gib}
            lines.append(host_quota_line(q.name, cpus, q.nominal_cpus, mem_gib,
                                         q.nominal_mem_gib))
    rates = ctx.oracle.real_rates(spec)
    if measured(svc, spec):
        lines.append("allowed flavors here: " + (", ".join(
            f"{r.flavor} ({r.consolidated:g} steps/s)" for r in rates) or "none"))
    else:
        lines.append("allowed flavors here: " + (", ".join(r.flavor.short for r in rates)
                                                 or "none"))
        lines.append(UNMEASURED)
    running = [r for r in svc.store.jobs(active_only=True)
               if r.state in (JobState.ADMITTED, JobState.RUNNING)]
    pending_me = replace(rec, state=JobState.PENDING)
    snap = build_snapshot(now, svc.cluster, [*running, pending_me], holding,
                          svc.tenancy.quotas, ctx.oracle, svc.policy_state,
                          svc.settings.round_s if svc.uses_rounds else None,
                          svc.settings.restore_s, svc.tenancy.quota_tree)
    snap = with_draining(snap, svc.store, holding)  # (the quota stopping runs still hold)
    now_place, preempts = _what_if(snap, svc, ctx, rec.job_id, seen)
    out["would_fit_now"] = now_place
    out["would_preempt"] = seen.visible(preempts)
    out["would_preempt_other_queues"] = len(preempts) - len(out["would_preempt"])
    name = svc.policy.display_name
    if now_place and preempts:
        lines.append(f"{name} would start it now on {now_place}, preempting "
                     f"{seen.names(preempts)}")
    elif now_place:
        lines.append(f"fits in the GPUs free now: {now_place}; {name} starts it when no "
                     "higher-ranked job claims them")
    else:
        lines.append(f"{name} would not start it now")
    alone = Snapshot(now_s=now, cluster=svc.cluster, jobs=tuple(
        v for v in snap.jobs if v.job_id == rec.job_id), policy_state=snap.policy_state,
        round_s=snap.round_s)
    out["would_go_when_empty"] = _what_if(alone, svc, ctx, rec.job_id, seen)[0]
    lines.append(f"on an empty cluster it would run on {out['would_go_when_empty'] or 'nothing'}")
    return out


#: What ``explain`` says of a job whose speed nobody measured.
UNMEASURED = ("speed: not known (no model and no profile of its job type), so the scheduler "
              "counts every allowed flavor alike")


def host_quota_line(queue: str, cpus: float, nominal_cpus: float | None, mem_gib: float,
                    nominal_mem_gib: float | None) -> str:
    """``explain``'s line on a queue's ``cpus``/``memory`` quota: what its CPU-only jobs hold
    (running, planned, draining: ``/api/queues``' ``used_cpus``/``used_memory_gib``) of it.

    For example ``queue team-a: its CPU-only jobs hold 8 of 8 CPUs (cpus quota), 16 GiB of
    memory (no memory quota)``: a job that waits ``at its CPU quota`` is told the numbers."""
    cpu = f"{cpus:g} of {nominal_cpus:g} CPUs (cpus quota)" if nominal_cpus is not None \
        else f"{cpus:g} CPUs (no cpus quota)"
    mem = f"{mem_gib:g} of {nominal_mem_gib:g} GiB of memory (memory quota)" \
        if nominal_mem_gib is not None else f"{mem_gib:g} GiB of memory (no memory quota)"
    return f"queue {queue}: its CPU-only jobs hold {cpu}, {mem}"


def measured(svc: LiveService, spec: JobSpec) -> bool:
    """Whether the job's speeds come from a measurement (its model's or job type's profile,
    or its 3-D plan), not from the placeholder rate a plain command gets."""
    return spec.parallelism is not None or spec.job_type in svc.oracle.table.job_types()


def _what_if(snap: Snapshot, svc: LiveService, ctx: DecisionContext, job_id: str,
             seen: JobNames) -> tuple[str | None, list[str]]:
    """Where the service's policy would place ``job_id`` in ``snap`` (said as ``seen`` may
    read it), and whom it would preempt for it (every id: the caller filters)."""
    d = decide(snap, svc.policy, ctx, svc.placement)
    p = d.placements.get(job_id)  # type: ignore[call-overload]
    if p is None:
        return None, []
    return seen.describe(p), sorted(str(j) for j in d.preempted)
