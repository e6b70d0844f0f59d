"""Bootstrap profiles take idle GPUs only: a fill-only decision about them after each event.

A job's short bootstrap profiles (:mod:`tessera.sim.bootstrap`) must not displace running
work: a one-minute measurement that preempts an 8-GPU gang costs that gang its checkpoint and
restore, and a policy that ranks by attained service (LAS) or remaining work (SRPT) would rank
every fresh profile first. So under the event and round drivers the world's full decisions
leave profiling jobs out (:meth:`SimWorld.snapshot`), and after every event the driver calls
:func:`fill_profiles`.

* ``serial`` mode: the decision core is asked *fill-only* (idle GPUs, nobody preempted or
  moved, the policy's memory left as it was) about the profiles waiting, and nothing else. A
  profile thus starts as soon as a GPU of its flavor is idle -- on arrival, between rounds,
  after another job ends -- and waits otherwise.
* ``lean`` mode (:func:`fill_concurrent`): the core cannot express "the job's gang on each
  of these flavors at once", so the simulator places the profiles itself, outside the core:
  each waiting profile, in arrival order, takes as many idle GPUs as the job's gang of every
  flavor it has still to profile that has them (on the first node in the cluster's order
  that has them all, else gathered over its nodes in that order), all at once, for one
  profile's length. A profile never waits: one that finds no flavor with enough idle GPUs
  ends the job's profiling there (the flavors left keep their estimate), and the job joins
  the queue as its real gang.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobState
from tessera.sim.events import COMPLETE
from tessera.sim.world import SimWorld


def fill_profiles(world: SimWorld, t_s: float) -> None:
    """Place the waiting bootstrap profiles into idle GPUs of their flavors (if any)."""
    profiles = world.profiles
    if profiles is None or not profiles.profiling():
        return
    if profiles.mode == "lean":
        fill_concurrent(world, t_s)
        return
    if not any(v > 0 for v in world.free.values()):
        return
    snap = world.snapshot(t_s, profiles=True)
    waiting = profiles.waiting(snap.jobs)
    if not waiting:
        return
    state = world.policy_state
    d = world.decide(replace(snap, jobs=waiting, split_hint=None), world.fill_opts)
    world.policy_state = state
    world.apply(d, t_s)


def fill_concurrent(world: SimWorld, t_s: float) -> None:
    """``lean`` mode: start each waiting profile on its gang's size of idle GPUs of every
    flavor it has still to profile that has them, at once; end the profiling of a job that
    finds none (module docstring)."""
    profiles = world.profiles
    if profiles is None:
        return
    for idx in sorted(profiles.profiling()):
        job = world.jobs[idx]
        if job.state is not JobState.PENDING:
            continue
        gpus = profiles.profile_gpus(idx)
        parts = [(flavor, nodes) for flavor in profiles.todo(idx)
                 if (nodes := _idle_gpus(world, flavor, gpus))]
        if not parts:
            profiles.end(job)  # (a profile never waits: the job queues as its real gang)
            continue
        p, rate = profiles.pin_concurrent(job, parts)
        world.start(job, p, t_s)
        if job.rate <= 0:  # (no true speed for the mixed copy: it runs on its own clock)
            job.rate = rate
            world.schedule(job.progress_from_s + job.remaining / rate, COMPLETE, idx,
                           job.epoch)
        profiles.observe_started(job, [f for f, _n in parts])


def _idle_gpus(world: SimWorld, flavor: GpuFlavor, gpus: int) -> tuple[tuple[str, int], ...]:
    """``gpus`` idle GPUs of ``flavor`` as ``((node_id, count), ...)``: on the first node (in
    cluster order) that has them all, else gathered over its nodes in that order; empty
    when the flavor has fewer idle GPUs."""
    free = world.free
    if free.total(flavor) < gpus:
        return ()
    nodes = [n.node_id for n in world.cluster if n.flavor == flavor and free[n.node_id] > 0]
    whole = next((n for n in nodes if free[n] >= gpus), None)
    if whole is not None:
        return ((whole, gpus),)
    out, left = [], gpus
    for n in nodes:
        take = min(free[n], left)
        out.append((n, take))
        left -= take
        if left == 0:
            break
    return tuple(sorted(out, key=lambda nc: -nc[1]))
