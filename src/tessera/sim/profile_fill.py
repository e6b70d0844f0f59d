"""Bootstrap profiles take idle GPUs only: a fill-only decision about them after each event
(Gavel's loop: a first fit after each round, :func:`gavel_profile_placements`).

A job's short bootstrap profiles (:mod:`tessera.sim.bootstrap`) must not displace running
work: a one-minute measurement that preempts an 8-GPU gang costs that gang its checkpoint and
restore, and a policy that ranks by attained service (LAS) or remaining work (SRPT) would rank
every fresh profile first. So under the event and round drivers the world's full decisions
leave profiling jobs out (:meth:`SimWorld.snapshot`), and after every event the driver calls
:func:`fill_profiles`: the decision core is asked *fill-only* (idle GPUs, nobody preempted or
moved, the policy's memory left as it was) about the profiles waiting, and nothing else. A
profile thus starts as soon as a GPU of its flavor is idle -- on arrival, between rounds,
after another job ends -- and waits otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tessera.model.jobs import JobId
from tessera.sched.core.snapshot import Placement
from tessera.sim.world import SimWorld


def fill_profiles(world: SimWorld, t_s: float) -> None:
    """Place the waiting bootstrap profiles into idle GPUs of their flavors (if any)."""
    profiles = world.profiles
    if profiles is None or not profiles.profiling() or not any(
            v > 0 for v in world.free.values()):
        return
    snap = world.snapshot(t_s, profiles=True)
    waiting = profiles.waiting(snap.jobs)
    if not waiting:
        return
    state = world.policy_state
    d = world.decide(replace(snap, jobs=waiting, split_hint=None), world.fill_opts)
    world.policy_state = state
    world.apply(d, t_s)


def gavel_profile_placements(world: SimWorld, taken: Mapping[JobId, Placement]
                             ) -> dict[JobId, Placement]:
    """Gavel's loop: the waiting bootstrap profiles' placements for the next round.

    Gavel's policies keep per-job memory across rounds (finish-time fairness's cumulative
    isolated time, the mechanism's time accounts), which a profile -- a 1-GPU copy of the job
    with a few minutes of work -- would mix with the job's own. So in Gavel's loop profiles
    never enter the policy (:meth:`SimWorld.snapshot` leaves them out; the policy first sees a
    job after its profiles, as a new arrival): after the policy's round, each waiting profile,
    in arrival order, takes one GPU the round left idle on a flavor it has still to profile
    (first fit, nodes in cluster order) for the round.
    """
    profiles = world.profiles
    if profiles is None or not profiles.profiling():
        return {}
    free = {node.node_id: node.gpus for node in world.cluster}
    counted: set[JobId] = set()
    for jid, p in taken.items():
        if any(mate in counted for mate in p.colocated_with):
            continue  # (a co-located pair holds its GPUs once)
        counted.add(jid)
        for node_id, k in p.gpus_by_node:
            free[node_id] -= k
    out: dict[JobId, Placement] = {}
    for job in world.active.values():
        if job.idx not in profiles or job.spec.job_id in taken:
            continue
        for node in world.cluster:
            if free[node.node_id] > 0 and node.flavor in job.spec.flavors:
                free[node.node_id] -= 1
                out[job.spec.job_id] = Placement((node.flavor,), ((node.node_id, 1),))
                break
    return out
