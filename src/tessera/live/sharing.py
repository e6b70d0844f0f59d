"""Shared GPUs in the live service: two runs on one GPU set (a packing policy's co-location).

A packing policy (``Policy.packs``) may place a *partner* on the GPUs of a running *host*
(:mod:`tessera.sched.packing.pairs` checks the pair: both jobs agreed to share, the pair's speeds
were measured, their memory fits). The service carries that out with three rules, the live
twins of the simulator's :mod:`tessera.sim.sharing`:

* **A GPU set shared by two runs is counted once.** The run that holds the GPUs (the first of
  the pair, by when its allocation was written) counts them; the other is a *rider*
  (:func:`riders`) and holds nothing of its own: the free GPUs the decision core sees, the
  launch gate and the cluster view count the set once. A rider launches only once its host
  runs, on the host's GPUs (``LaunchSpec.share_with``): the local executor gives both runs the
  same ``CUDA_VISIBLE_DEVICES``; the Ray executor runs the rider in the bundles of the
  placement group that holds the host's GPUs, so Ray assigns it the same node and devices and
  reserves them once.
* **A label change is not a restart.** When a partner comes or goes (joins, completes, fails,
  is preempted or moves away), the run that stays keeps running: its allocation is relabelled
  in place (:func:`relabels`); nothing stops, nothing is charged. The exception is the
  simulator's: when a pair breaks and the decision keeps *both* jobs on that node with the
  same count, the core (which counts GPUs, not which ones) gave one of them other GPUs there,
  so the rider -- the job that joined second -- moves; and when two jobs that ran apart are
  paired, one stays and the other moves onto its GPUs.
* **Quotas count what each job asked for.** Each job of a pair counts its full GPU count
  against its queue's quota (as Kueue counts requests, and as the decision core admits): a
  job's charge does not depend on whom the scheduler paired it with, admission cannot know
  whether a job will be paired, and no queue gets more than its quota by being packed. So
  ``/api/queues`` (quota use) may add up to more than ``/api/cluster`` (GPUs physically held).

**Mechanism.** How two processes share a GPU on a node (MPS or time-slicing) is the executor's
to find out, where the ranks run: :mod:`tessera.live.executors.gpu_sharing`; the job's events
say which (:func:`record_sharing`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import replace

from tessera.live.executors.gpu_sharing import Mechanism
from tessera.live.store import Allocation, Store
from tessera.live.where import describe
from tessera.model.jobs import JobId
from tessera.sched.core.snapshot import Placement

RunKey = tuple[str, int]


def same_gpus(a: Placement, b: Placement) -> bool:
    """Whether two placements are the same gang, whoever shares it: the same GPUs
    (:meth:`Placement.same_gpus <tessera.sched.core.snapshot.Placement.same_gpus>`) at the same
    batch, i.e. every compared field of a placement equal but ``colocated_with``."""
    return a.same_gpus(b) and a.global_batch_samples == b.global_batch_samples


def riders(allocations: Iterable[Allocation]) -> dict[RunKey, RunKey]:
    """``{rider run: host run}`` among ``allocations`` (see the module docstring).

    A run rides when it names, in ``colocated_with``, the job of an earlier run (by when its
    allocation was written: time, then write order) that holds the same GPUs. A decision
    labels both runs of a new pair, and the partner's run is always written after its host's;
    a run whose partner has left keeps its stale label until the next decision relabels it,
    and rides until then only if that partner's run still holds the GPUs (draining).
    """
    ordered = sorted(allocations, key=lambda a: (a.created_s, a.seq, a.job_id, a.run))
    holders: dict[str, list[Allocation]] = {}
    out: dict[RunKey, RunKey] = {}
    for a in ordered:
        host = _host_of(a, holders)
        if host is not None:
            out[(a.job_id, a.run)] = (host.job_id, host.run)
            continue
        holders.setdefault(a.job_id, []).append(a)
    return out


def _host_of(a: Allocation, holders: Mapping[str, list[Allocation]]) -> Allocation | None:
    """The earlier holding run ``a`` shares GPUs with, if any."""
    for mate in a.placement.colocated_with:
        for b in holders.get(mate, ()):
            if same_gpus(a.placement, b.placement):
                return b
    return None


def counted(allocations: list[Allocation]) -> list[Allocation]:
    """The allocations that hold GPUs of their own: every one but the riders."""
    ride = riders(allocations)
    return [a for a in allocations if (a.job_id, a.run) not in ride]


def relabels(started: Iterable[JobId], placements: Mapping[JobId, Placement],
             current: Mapping[str, Allocation]) -> list[JobId]:
    """The started jobs whose current run stays where it is, only its partner changing.

    Args:
        started: the decision's started jobs, in its order.
        placements: the decision's placements.
        current: each job's current (planned or running) allocation.
    """
    out: list[JobId] = []
    for jid in started:
        cur, new = current.get(jid), placements[jid]
        if cur is None or not same_gpus(cur.placement, new):
            continue
        old_mate = cur.placement.colocated_with[0] if cur.placement.colocated_with else None
        new_mate = new.colocated_with[0] if new.colocated_with else None
        if old_mate is not None and old_mate != new_mate and _joined_second(cur, current.get(
                old_mate)):
            other = placements.get(old_mate)
            if other is not None and same_gpus(other, new):
                continue  # both stay on that node apart: the one that joined second moves
        if new_mate is not None and new_mate != old_mate and new_mate in out:
            continue  # both ran apart there: this one moves to join the other
        out.append(jid)
    return out


def _joined_second(a: Allocation, mate: Allocation | None) -> bool:
    return mate is not None and (a.created_s, a.seq, a.job_id) > (mate.created_s, mate.seq,
                                                                  mate.job_id)


def relabel_run(store: Store, db: sqlite3.Connection, a: Allocation, p: Placement,
                now_s: float) -> None:
    """``a``'s run keeps its GPUs, only the job sharing them changes: store the new label and
    say so in the job's events."""
    store.set_allocation(db, a.job_id, a.run, colocated_with=",".join(p.colocated_with))
    if p.colocated_with:
        what = (f"run {a.run} now shares {describe(p)} with job "
                f"{', '.join(p.colocated_with)}; it keeps running")
    else:
        what = (f"run {a.run} has {describe(p)} to itself again (job "
                f"{', '.join(a.placement.colocated_with)} left); it keeps running")
    store.event(db, now_s, a.job_id, "sharing", what)


def record_sharing(store: Store, db: sqlite3.Connection, a: Allocation, host: RunKey,
                   mech: Mechanism, now_s: float) -> None:
    """Say, in both jobs' events, how run ``a`` shares the GPUs of run ``host``."""
    gpus = describe(replace(a.placement, colocated_with=()))
    store.event(db, now_s, a.job_id, "sharing",
                f"run {a.run}: sharing {gpus} with job {host[0]} (run {host[1]}) by {mech.kind}")
    store.event(db, now_s, host[0], "sharing",
                f"run {host[1]}: job {a.job_id} (run {a.run}) joins its GPUs by {mech.kind}")
