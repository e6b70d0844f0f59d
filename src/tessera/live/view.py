"""From stored rows to the core's :class:`~tessera.sched.core.snapshot.Snapshot` (and back to
words).

The store knows more states than the core needs. The mapping:

* PENDING → a pending :class:`JobView`;
* ADMITTED (launch planned, not yet confirmed) and RUNNING → a running view with the
  allocation's placement: the gang holds those GPUs;
* a run that is *stopping* (preempted, moving or cancelled, still inside its grace period)
  still holds its GPUs, but its job may not be placed again yet: the job is left out, and the
  GPUs are not free in the snapshot (:func:`free_gpus`), so nobody else is placed on them; a
  moving job's next run, planned already, holds its new GPUs the same way.

Progress is measured in the oracle's steps: seconds run on each flavor times the job's rate
there (1 step/s for unprofiled commands), so ``remaining_steps`` shrinks as a job runs and
size-aware policies (SRPT) see it.

**When a run's restore ends.** A run that resumes a job which ran before (an earlier run of it
ended: it was preempted, moved, resized or failed) first restores its checkpoint; the service
cannot see inside the run, so it takes the settings' word for it: the run progresses from
``started_s + restore_s`` (:func:`progress_start_s`). A job's first run progresses from its
start. That is the view's ``progress_from_s``, the time the lease of
:func:`tessera.sched.core.cadence.leased` counts from -- as the simulator's does, whose runs
progress after their restore -- so a round-based policy keeps a resumed run until it has made
checkpoint + restore of progress *after* restoring, live as in simulation (issue 31: counted
from the launch, the lease ran out while a 60 s round's run was still half restoring).
(The steps a run made are still counted from its start: a job's measured progress is the
service's bookkeeping, unchanged; only where its progress begins for the lease and for
policies that read ``progress_from_s`` is shifted.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from tessera.live.sharing import counted, same_gpus
from tessera.live.speeds import RunSpeeds, running_mates
from tessera.live.store import Allocation, JobRecord
from tessera.model.cluster import ClusterSpec
from tessera.model.host_need import gang_host_by_node
from tessera.model.jobs import JobState
from tessera.perf.goodput_fit import StepFits
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import JobView, Placement, QueueQuota, Snapshot
from tessera.sched.core.tenancy import Tenancy as QuotaTree


def free_gpus(cluster: ClusterSpec, holding: list[Allocation]) -> dict[str, int]:
    """Free GPUs per node: capacity minus every GPU a run holds or is planned to take, a GPU
    set that two runs share counted once (:func:`tessera.live.sharing.counted`).

    A run planned onto GPUs that a preempted run is still draining (inside its grace period)
    and the draining run claim the same GPUs for a while; a node's free count is therefore
    clamped at zero rather than counted twice (the decision that planned the new run already
    gave it those GPUs).
    """
    used: dict[str, int] = defaultdict(int)
    for a in counted(holding):
        for node, count in a.placement.gpus_by_node:
            used[node] += count
    return {n.node_id: max(n.gpus - used.get(n.node_id, 0), 0) for n in cluster.nodes}


def progress_start_s(rec: JobRecord, started_s: float, restore_s: float) -> float:
    """When run of ``rec`` that started at ``started_s`` begins to progress: after
    ``restore_s`` if it resumes (an earlier run of the job ended), at once if it is the job's
    first run (see the module docstring)."""
    return started_s + restore_s if rec.last_run_end_s is not None else started_s


def build_snapshot(
    now_s: float,
    cluster: ClusterSpec,
    records: list[JobRecord],
    holding: list[Allocation],
    quotas: dict[str, QueueQuota],
    oracle: ThroughputOracle,
    policy_state: object,
    round_s: float | None = None,
    restore_s: float = 0.0,
    tenancy: QuotaTree | None = None,
    noise_scales: Mapping[str, float] | None = None,
    step_fits: Mapping[str, StepFits] | None = None,
) -> Snapshot:
    """The snapshot ``decide()`` sees (see the module docstring for the mapping);
    ``restore_s``: what a resumed run spends restoring before it progresses; ``tenancy``: the
    whole tenancy the core enforces (``Snapshot.tenancy``), when the service has one;
    ``noise_scales``: each job's reported gradient noise scale (:mod:`.progress`), laid on
    its view for Sia and Pollux; ``step_fits``: each job's step-time fits from its reports
    (:mod:`.step_fits`), laid on its view the same way."""
    gns_of = noise_scales or {}
    fits_of = step_fits or {}
    current = {a.job_id: a for a in holding if a.status in ("planned", "running")}
    nodes = {n.node_id: n for n in cluster.nodes}
    draining = [a for a in holding if a.status == "stopping"]
    draining_jobs = {a.job_id for a in draining}
    mates = running_mates(holding)
    specs = {r.job_id: r.job.spec for r in records}
    speeds = RunSpeeds(oracle)
    views: list[JobView] = []
    for rec in records:
        jid = rec.job_id
        spec = rec.job.spec
        alloc = current.get(jid)
        if rec.state is JobState.PENDING and jid not in draining_jobs:
            state, placement = JobState.PENDING, None
        elif rec.state in (JobState.ADMITTED, JobState.RUNNING) and alloc is not None:
            state, placement = JobState.RUNNING, _present_mates(alloc.placement, current)
            if spec.host is not None and placement is not None:  # (what the core's find
                # gives such a job: its amounts per node, so a gang that stays is not a move)
                placement = replace(placement, host_by_node=gang_host_by_node(
                    placement.gpus_by_node, spec.host, nodes))
        else:
            continue
        done = speeds.done_before(rec)
        run_s = dict(rec.run_s_by_flavor)
        ran_s, rate, since_s = 0.0, 0.0, 0.0
        if alloc is not None and alloc.started_s is not None:
            # The current run counts up to now, as the simulator's views do, at the speed it
            # runs now: beside a partner's run at their pair speed (live.speeds).
            mate = mates.get((jid, alloc.run))
            now_rate = speeds.rate(spec, alloc, specs.get(mate.job_id) if mate else None)
            done = done + speeds.steps(alloc, now_rate, now_s)
            if state is JobState.RUNNING:
                ran_s = max(now_s - alloc.started_s, 0.0)
                rate = now_rate
                since_s = progress_start_s(rec, alloc.started_s, restore_s)
        remaining = max(spec.total_steps - done, 1e-3)
        if ran_s > 0 and alloc is not None:
            g = alloc.placement.num_gpus
            for f, n in alloc.placement.flavor_counts():
                run_s[f] = run_s.get(f, 0.0) + (ran_s if n == g else ran_s * n / g)
        views.append(JobView(
            spec=spec, state=state, remaining_steps=remaining, placement=placement,
            attained_gpu_s=rec.attained_gpu_s + ran_s * spec.num_gpus,
            run_s_by_flavor=tuple(sorted(run_s.items(), key=lambda fs: fs[0].short)),
            pending_since_s=rec.pending_since_s, last_run_end_s=rec.last_run_end_s,
            attempts=rec.attempts, as_of_s=now_s, progress_rate=rate, progress_from_s=since_s,
            noise_scale_samples=gns_of.get(jid), step_fits=fits_of.get(jid, ()),
        ))
    return Snapshot(now_s=now_s, cluster=cluster, jobs=tuple(views), quotas=quotas,
                    policy_state=policy_state, round_s=round_s,
                    free_gpus=free_gpus(cluster, holding), tenancy=tenancy)


def _present_mates(p: Placement, current: dict[str, Allocation]) -> Placement:
    """``p`` naming only the partners that still have a run on its GPUs: a run keeps a partner
    that left (completed, failed, stopped) in its label until a decision relabels it, and the
    policy must see it alone, as the simulator shows it."""
    if not p.colocated_with:
        return p
    here = tuple(m for m in p.colocated_with
                 if m in current and same_gpus(current[m].placement, p))
    return p if here == p.colocated_with else replace(p, colocated_with=here)


def queue_usage(holding: list[Allocation], queue_of: dict[str, str]) -> dict[str, int]:
    """GPUs charged per queue (running, planned and draining runs): each run at its full size,
    a run on shared GPUs included (the quota rule of :mod:`tessera.live.sharing`)."""
    out: dict[str, int] = defaultdict(int)
    for a in holding:
        q = queue_of.get(a.job_id)
        if q is not None:
            out[q] += a.placement.num_gpus
    return dict(out)


def cpu_only_usage(holding: list[Allocation], queue_of: dict[str, str]
                   ) -> dict[str, tuple[float, float]]:
    """``{queue: (cpus, mem_gib)}`` its CPU-only runs (running, planned, draining) hold: what
    a queue's ``cpus``/``memory`` quota is charged (:mod:`tessera.sched.core.host_quota`)."""
    out: dict[str, tuple[float, float]] = {}
    for a in holding:
        q = queue_of.get(a.job_id)
        if q is None or a.placement.num_gpus != 0:
            continue
        c, m = out.get(q, (0.0, 0.0))
        out[q] = (c + sum(x for _n, x, _m in a.placement.host_by_node),
                  m + sum(x for _n, _c, x in a.placement.host_by_node))
    return out
