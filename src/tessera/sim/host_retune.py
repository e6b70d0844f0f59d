"""Re-timing running gangs whose CPUs or memory a resource mode changed.

Synergy-TUNE (:mod:`tessera.sched.resources.allocate`) may take back CPUs or memory a running
gang holds beyond its proportional share, to give a newcomer its share: the decision then
lists that gang with the *same GPUs* and a smaller ``host_by_node``, without starting it
again. :func:`retune` carries that out in the simulator: the gang keeps running (no restart,
no checkpoint), its progress is settled up to now, and from now on it runs at the speed its
sensitivity gives at what it still holds; its completion (and any booked failure) is booked
again, as a changed elastic speed is (:mod:`tessera.sim.elastic`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Placement
from tessera.sched.resources.speed import host_speedup
from tessera.sim.host_book import HostBook
from tessera.sim.state import SimJob

Schedule = Callable[[float, int, int, int], None]


def retune(jobs: Iterable[SimJob], placements: Mapping[JobId, Placement], t_s: float,
           truth: ThroughputOracle, cluster: ClusterSpec, schedule: Schedule,
           complete_kind: int, fail_kind: int, host: HostBook | None = None) -> int:
    """Apply host-only changes of running ``jobs`` at ``t_s``; returns how many changed.

    The world calls it before the round's starts, so CPUs a running gang gives back are free
    for the newcomers that were planned onto them. With a ``host`` book, every changed gang's
    old amounts are given back first and the new ones booked after (one gang may shrink while
    another grows on the same node)."""
    moved = []
    for job in jobs:
        old = job.placement
        new = placements.get(job.spec.job_id)
        if (job.state is not JobState.RUNNING or old is None or new is None or new is old
                or new == old or not new.same_gpus(old)):
            continue
        moved.append((job, new))
    if host is not None:
        for job, _new in moved:
            host.stop(job.spec)
        for job, new in moved:
            host.start(job.spec, new)
    changed = 0
    for job, new in moved:
        job.advance(t_s)
        job.placement = new
        job.view = None
        rate = truth.placement_rate(job.spec, new) * host_speedup(job.spec, new, cluster)
        changed += 1
        if rate == job.rate or rate <= 0:
            continue
        job.rate = rate
        job.epoch += 1
        schedule(max(job.progress_from_s, t_s) + job.remaining / rate, complete_kind,
                 job.idx, job.epoch)
        if job.fail_at_s is not None:
            schedule(max(job.fail_at_s, t_s), fail_kind, job.idx, job.epoch)
    return changed
