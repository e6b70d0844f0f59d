"""From stored rows to the core's :class:`~tessera.sched.snapshot.Snapshot` (and back to words).

The store knows more states than the core needs. The mapping:

* PENDING → a pending :class:`JobView`;
* ADMITTED (launch planned, not yet confirmed) and RUNNING → a running view with the
  allocation's placement: the gang holds those GPUs;
* a run that is *stopping* (preempted or cancelled, still inside its grace period) still holds
  its GPUs, but its job may not be placed again yet: the job is left out and its GPUs are taken
  out of the cluster handed to ``decide()``, so nobody else is placed on them either.

Progress is measured in the oracle's steps: seconds run on each flavor times the job's rate
there (1 step/s for unprofiled commands), so ``remaining_steps`` shrinks as a job runs and
size-aware policies (SRPT) see it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from tessera.live.store import Allocation, JobRecord
from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobState
from tessera.sched.oracle import ThroughputOracle
from tessera.sched.snapshot import JobView, QueueQuota, Snapshot


def cluster_minus(cluster: ClusterSpec, held: Iterable[Allocation]) -> ClusterSpec:
    """The cluster with the GPUs of ``held`` allocations removed from their nodes."""
    used: dict[str, int] = defaultdict(int)
    for a in held:
        for node, count in a.placement.gpus_by_node:
            used[node] += count
    if not used:
        return cluster
    nodes = tuple(replace(n, gpus=max(n.gpus - used.get(n.node_id, 0), 0)) for n in cluster.nodes)
    return ClusterSpec(cluster.name, nodes)


def progress_steps(rec: JobRecord, oracle: ThroughputOracle, current: Allocation | None,
                   now_s: float) -> float:
    """Steps done so far: past runs per flavor plus the current run's elapsed time."""
    spec = rec.job.spec
    done = sum(s * oracle.rate(spec, f, True) for f, s in rec.run_s_by_flavor.items())
    if current is not None and current.started_s is not None:
        p = current.placement
        done += (now_s - current.started_s) * oracle.placement_rate(spec, p)
    return done


def build_snapshot(
    now_s: float,
    cluster: ClusterSpec,
    records: list[JobRecord],
    holding: list[Allocation],
    quotas: dict[str, QueueQuota],
    oracle: ThroughputOracle,
    policy_state: object,
    round_s: float | None = None,
) -> Snapshot:
    """The snapshot ``decide()`` sees (see the module docstring for the mapping)."""
    current = {a.job_id: a for a in holding if a.status in ("planned", "running")}
    draining = [a for a in holding if a.status == "stopping"]
    draining_jobs = {a.job_id for a in draining}
    views: list[JobView] = []
    for rec in records:
        jid = rec.job_id
        spec = rec.job.spec
        alloc = current.get(jid)
        if rec.state is JobState.PENDING and jid not in draining_jobs:
            state, placement = JobState.PENDING, None
        elif rec.state in (JobState.ADMITTED, JobState.RUNNING) and alloc is not None:
            state, placement = JobState.RUNNING, alloc.placement
        else:
            continue
        remaining = max(spec.total_steps - progress_steps(rec, oracle, alloc, now_s), 1e-3)
        views.append(JobView(
            spec=spec, state=state, remaining_steps=remaining, placement=placement,
            attained_gpu_s=rec.attained_gpu_s + (
                (now_s - alloc.started_s) * spec.num_gpus
                if alloc is not None and alloc.started_s is not None else 0.0),
            run_s_by_flavor=tuple(sorted(rec.run_s_by_flavor.items())),
            pending_since_s=rec.pending_since_s, last_run_end_s=rec.last_run_end_s,
            attempts=rec.attempts,
        ))
    return Snapshot(now_s=now_s, cluster=cluster_minus(cluster, draining), jobs=tuple(views),
                    quotas=quotas, policy_state=policy_state, round_s=round_s)


def queue_usage(holding: list[Allocation], queue_of: dict[str, str]) -> dict[str, int]:
    """GPUs held per queue (running, planned and draining runs)."""
    out: dict[str, int] = defaultdict(int)
    for a in holding:
        q = queue_of.get(a.job_id)
        if q is not None:
            out[q] += a.placement.num_gpus
    return dict(out)
