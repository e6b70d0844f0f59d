"""The quota a stopping run still holds, laid on a decision snapshot.

A run inside its grace period (cancelled, preempted, moving) still holds its GPUs, CPUs and
memory, but :func:`tessera.live.view.build_snapshot` leaves its job out (it may not be placed
again yet). Its GPUs are kept out of the free count there; its queue's *quota* is charged
here: :func:`with_draining` sets ``Snapshot.gpu_draining`` (GPU runs, per queue and
flavor: :mod:`tessera.sched.core.quota_drain`) and ``Snapshot.host_draining`` (CPU-only
runs' CPUs and memory: :mod:`tessera.sched.core.host_quota`).

The loop's round and ``tessera explain``'s what-if round both call it, so ``explain`` never
says a job "would start now" that the next round holds back for a draining run's quota --
and ``/api/queues`` and ``/metrics`` count the same runs (running, planned and draining).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from tessera.live.host_drain import draining_quota_use
from tessera.live.sharing import counted
from tessera.live.store import Allocation, JobRecord, Store
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.sched.core.snapshot import Placement, Snapshot

__all__ = ["draining_gpu_use", "queue_of_holding", "with_draining"]


def draining_gpu_use(store: Store, holding: Sequence[Allocation], seen: set[str],
                     cluster: ClusterSpec) -> tuple[tuple[str, Placement], ...]:
    """``((queue, placement), ...)`` of the stopping GPU runs whose job is not in ``seen``
    (the snapshot's jobs): a cancelled or preempted job's run. A moving or resized job's old
    run is left out: its job is in the snapshot with the new run's GPUs, charged there.

    A run that a decision already planned onto a draining run's GPUs (a preemption: the new
    run launches once the victim exits) holds the same GPUs, and is charged to its own queue;
    the draining run is charged only the GPUs of each node that no planned or running run
    claims (as :func:`tessera.live.view.free_gpus` clamps), so a reclaim does not count the
    same GPUs twice against the cohort. One store read per such run (usually none)."""
    left = {n.node_id: n.gpus for n in cluster.nodes}
    for a in counted(list(holding)):
        if a.status != "stopping":
            for node, count in a.placement.gpus_by_node:
                left[node] = left.get(node, 0) - count
    out: list[tuple[str, Placement]] = []
    for a in counted(list(holding)):
        if a.status != "stopping" or a.placement.num_gpus == 0 or a.job_id in seen:
            continue
        parts: list[tuple[str, GpuFlavor, int]] = []
        for node, count, flavor in a.placement.parts():
            held = min(count, max(left.get(node, 0), 0))
            left[node] = left.get(node, 0) - held
            if held > 0:
                parts.append((node, flavor, held))
        rec = store.get(a.job_id) if parts else None
        if rec is not None:
            out.append((rec.queue, Placement.mixed(tuple(parts))))
    return tuple(out)


def with_draining(snap: Snapshot, store: Store, holding: Sequence[Allocation]) -> Snapshot:
    """``snap`` with the quota its stopping runs hold (see the module docstring); ``snap``
    itself when none is stopping."""
    if not any(a.status == "stopping" for a in holding):
        return snap
    seen = {str(j.spec.job_id) for j in snap.jobs}
    return replace(snap, host_draining=draining_quota_use(store, holding),
                   gpu_draining=draining_gpu_use(store, holding, seen, snap.cluster))


def queue_of_holding(store: Store, holding: Sequence[Allocation],
                     active: Iterable[JobRecord] | None = None) -> dict[str, str]:
    """``{job_id: queue}`` of every run in ``holding``: the active jobs' (``active``, if the
    caller read them already), plus a cancelled job's run still draining (no longer active,
    still holding its GPUs), as ``/api/queues`` and ``/metrics`` count them."""
    out = {r.job_id: r.queue for r in (store.jobs(active_only=True) if active is None
                                       else active)}
    for a in holding:
        if a.job_id not in out and (rec := store.get(a.job_id)) is not None:
            out[a.job_id] = rec.queue
    return out
