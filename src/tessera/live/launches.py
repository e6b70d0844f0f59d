"""Step 4 of the loop: launch planned runs, confirm them, signal stopping ones.

:func:`act` launches a planned run only once every GPU it needs is free of other runs (a run
planned onto GPUs that a preempted or moving run still drains waits for it), except a packing
policy's *rider*, which launches on its host's GPUs once the host runs (:func:`launch` gives
it the host's sharing mechanism). A launch that raises is the run's failure, recorded at once.

**A launched run until it runs.** Launches do not block the loop (:func:`act`): an executor
that needs time -- Ray reserving a placement group, starting one actor per rank -- says
``starting``, and the run's allocation stays ``planned`` (its GPUs held, nothing else placed
on them) until a later look says how it went:

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
from dataclasses import replace

from tessera.live import lifecycle
from tessera.live.batches import plan_local_batches, plan_rank_roles
from tessera.live.executors.base import (
    HostEnforcingExecutor,
    LaunchSpec,
    RunStatus,
    SharingExecutor,
)
from tessera.live.faults import crash_point
from tessera.live.host_drain import host_draining, waits_for_host
from tessera.live.loop_parts import ServiceParts
from tessera.live.resize import run_batch
from tessera.live.sharing import record_sharing, riders
from tessera.live.store import HOLDING, Allocation
from tessera.live.tenancy import JobDefaults
from tessera.model.host_need import gang_host_by_node
from tessera.model.jobs import JobSpec, JobState
from tessera.sched.core.snapshot import Placement

MIN_BACKOFF_S = 5.0
MAX_BACKOFF_S = 120.0
log = logging.getLogger("tessera.live")


def confirm(svc: ServiceParts, a: Allocation, now_s: float) -> None:
    """Ask the executor about launched run ``a`` and act on the answer (module docstring)."""
    key = (a.job_id, a.run)
    st = svc.executor.status(a.job_id, a.run)
    if st.state in ("starting", "absent"):
        svc.launching.add(key)
        return
    svc.launching.discard(key)
    if st.state != "unplaceable":
        with svc.store.tx() as db:
            lifecycle.mark_running(svc.store, db, a, svc.clock(), f"run {a.run} launched",
                                   svc.speeds)
        svc.backoff.pop(a.job_id, None)
        return
    last_s = svc.backoff.get(a.job_id, (0.0, MIN_BACKOFF_S / 2))[1]
    delay_s = min(2 * last_s, MAX_BACKOFF_S)
    svc.backoff[a.job_id] = (now_s + delay_s, delay_s)
    why = f"{st.detail}; trying again in {delay_s:g} s"
    with svc.store.tx() as db:
        lifecycle.withdraw_planned(svc.store, db, a.job_id, now_s, st.detail)
        svc.power.end(svc.store, db, a.job_id, a.run, now_s)  # limits back (live.run_power)
        rec = svc.store.get(a.job_id)
        if rec is not None and rec.state is JobState.ADMITTED:
            svc.store.transition(db, a.job_id, JobState.PENDING, now_s,
                                 f"run {a.run} not placed: {st.detail}",
                                 pending_since_s=now_s, reason=why)
    svc.executor.release(a.job_id, a.run)
    log.warning("job %s run %s: %s", a.job_id, a.run, why)
    svc.poke()


def act(svc: ServiceParts, now_s: float) -> None:
    """4. Launch planned runs and signal stopping ones (both idempotent).

    A planned run launches only once every GPU it needs is free of other runs: a run
    planned onto GPUs that a preempted or moving run still drains waits for that run to
    exit, so no GPU ever runs two jobs, not even inside a grace period -- unless a packing
    policy paired them: a partner's run (a *rider*, :func:`~tessera.live.sharing.riders`)
    holds no GPUs of its own and launches once its host runs. A launch never blocks: a
    run still starting stays ``planned`` until :func:`confirm` sees it run.
    """
    for key in sorted(svc.launching):
        cur = svc.store.allocation(*key)
        if cur is None or cur.status != "planned":  # cancelled or withdrawn meanwhile
            svc.launching.discard(key)
            if cur is None or cur.status == "done":
                svc.executor.release(*key)
                with svc.store.tx() as db:  # a limit never outlives its run (live.run_power)
                    svc.power.end(svc.store, db, *key, svc.clock())
    capacity = {n.node_id: n.gpus for n in svc.cluster.nodes}
    used: dict[str, int] = {}
    draining: set[str] = set()
    holding = svc.store.allocations(HOLDING)
    ride = riders(holding) if svc.policy.packs else {}  # runs on a partner's GPUs
    status = {(a.job_id, a.run): a.status for a in holding} if ride else {}
    for a in holding:
        if a.status == "planned":
            continue
        if (a.job_id, a.run) not in ride:
            for node, count in a.placement.gpus_by_node:
                used[node] = used.get(node, 0) + count
        if a.status == "stopping":
            draining.add(a.job_id)
    cpu_drain = host_draining(svc, holding)  # (CPUs a stopping run holds: host_drain)
    started: set[tuple[str, int]] = set()  # (launched in this pass: holding still says planned)
    for a in (a for a in holding if a.status == "planned"):
        host = ride.get((a.job_id, a.run))
        if (a.job_id, a.run) in svc.launching:
            confirm(svc, a, now_s)
        elif a.job_id in draining or (cpu_drain and waits_for_host(svc, a, holding, cpu_drain,
                                                                   started)):
            continue
        elif host is not None:  # joins its host's GPUs once the host runs there
            if status.get(host) == "running" and host not in svc.launching:
                launch(svc, a, host)
                started.add((a.job_id, a.run))  # (its CPUs count for the runs gated after it)
            continue
        elif any(used.get(node, 0) + count > capacity.get(node, 0)
                 for node, count in a.placement.gpus_by_node):
            continue
        else:
            launch(svc, a)
            started.add((a.job_id, a.run))
        if host is None:
            for node, count in a.placement.gpus_by_node:
                used[node] = used.get(node, 0) + count
    for a in svc.store.allocations(("stopping",)):
        if (a.job_id, a.run) not in svc.signalled and \
                svc.executor.stop(a.job_id, a.run, svc.opts.grace_s):
            svc.signalled.add((a.job_id, a.run))

def launch(svc: ServiceParts, a: Allocation, host: tuple[str, int] | None = None) -> None:
    """Launch run ``a``; ``host``: the run whose GPUs it joins (a co-located partner)."""
    rec = svc.store.get(a.job_id)
    assert rec is not None
    job = rec.job
    ckpt = job.checkpoint_dir or str(svc.work_dir / "checkpoints" / a.job_id)
    queue = svc.tenancy.job_defaults.get(job.spec.queue, JobDefaults())
    batch = run_batch(job, a.placement)
    batches = plan_local_batches(job, a.placement, svc.oracle, global_batch=batch)
    roles = (plan_rank_roles(job, a.placement, batch, svc.oracle.plans)
             if job.parallelism == "3d" and batch is not None else None)
    if roles is not None and roles.envs:
        batches = None                  # the plan's TESSERA_LOCAL_BATCH replaces the split
    for kind, note in (("local-batches", batches.describe() if batches else None),
                       ("plan", roles.summary if roles else None)):
        if note:
            with svc.store.tx() as db:
                svc.store.event(db, svc.clock(), a.job_id, kind, f"run {a.run}: {note}")
    env = svc.store.env(a.job_id)  # records are lean: env is read for the launch alone
    if batch is not None:
        env = (*env, ("TESSERA_GLOBAL_BATCH", str(batch)))
    if host is not None:
        assert isinstance(svc.executor, SharingExecutor)   # checked at construction
        mech = svc.executor.sharing_mechanism(host)
        with svc.store.tx() as db:
            record_sharing(svc.store, db, a, host, mech, svc.clock())
        env = (*env, *mech.env())
    spec = LaunchSpec(a.job_id, a.run, job.argv, env, a.placement, ckpt,
                      local_batches=batches.batches if batches else None,
                      rank_env=roles.envs if roles and roles.envs else None,
                      requires_locality=job.spec.requires_locality,
                      run_as=queue.run_as or svc.opts.run_as,
                      max_runtime_s=job.max_runtime_s or queue.max_runtime_s,
                      grace_s=svc.opts.grace_s, share_with=host,
                      progress=progress_for(svc, a.job_id, a.run),
                      host_by_node=run_host(svc, job.spec, a.placement))
    measure, limit_w = svc.power.begin(svc.store, a, job.power_limit_w, job.spec.exclusive,
                                       host, svc.clock(), packs=svc.policy.packs)
    if measure:  # the executor's ranks do it on their own GPUs (Ray: live.run_power_ray)
        spec = replace(spec, measure_power=True, power_limit_w=limit_w)
    try:
        svc.executor.launch(spec)
    except Exception as e:  # any launch failure is the run's failure
        with svc.store.tx() as db:
            svc.power.end(svc.store, db, a.job_id, a.run, svc.clock())
            svc.store.set_allocation(db, a.job_id, a.run, status="running",
                                      started_s=svc.clock())
            a2 = svc.store.allocation(a.job_id, a.run)
            assert a2 is not None
            lifecycle.finish_run(svc.store, db, a2,
                                 RunStatus("lost", detail=f"launch failed: {e}"),
                                 svc.clock(), svc.speeds)
        return
    crash_point("after-launch")
    note = (svc.executor.host_enforcement(a.job_id, a.run)
            if spec.host_by_node and isinstance(svc.executor, HostEnforcingExecutor) else None)
    if note:
        with svc.store.tx() as db:
            svc.store.event(db, svc.clock(), a.job_id, "host", f"run {a.run}: {note}")
    confirm(svc, a, svc.clock())


def run_host(svc: ServiceParts, spec: JobSpec, placement: Placement
             ) -> tuple[tuple[str, float, float], ...]:
    """What a run holds per node when its job declares CPUs/memory or its placement carries
    amounts (the core's one rule, :func:`~tessera.model.host_need.gang_host_by_node`); empty
    otherwise: a job that declares nothing runs as before, without pinning or limits."""
    if spec.host is None and not placement.host_by_node:
        return ()
    nodes = {n.node_id: n for n in svc.cluster.nodes}
    return gang_host_by_node(placement.gpus_by_node, spec.host, nodes, placement.host_by_node)


def progress_for(svc: ServiceParts, job_id: str, run: int) -> tuple[str, str] | None:
    """Where run ``(job_id, run)`` reports its progress, and its token (``None`` when the
    service has no URL: it was built without ``tessera serve``'s HTTP server)."""
    base = svc.opts.progress_url
    if base is None:
        return None
    return f"{base.rstrip('/')}/api/progress/{job_id}/{run}", svc.progress.token(job_id, run)
