"""Bootstrap profiles take idle GPUs only: a fill-only decision about them after each event.

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

from dataclasses import replace

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

