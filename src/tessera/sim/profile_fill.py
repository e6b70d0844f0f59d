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
* ``lean`` mode (:func:`fill_concurrent`): the core cannot express "one GPU of each of these
  flavors at once", so the simulator places the profiles itself, outside the core: each
  waiting profile, in arrival order, takes one idle GPU of every flavor it has still to
  profile that has one (the first such node in the cluster's order), all at once, for one
  profile's length. A profile never waits: one that finds no idle GPU of any of its flavors
  ends the job's profiling there (the flavors left keep their prior), and the job joins the
  queue as its real gang.
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
    """``lean`` mode: start each waiting profile on one idle GPU of every flavor it has still
    to profile that has one, at once; end the profiling of a job that finds none (module
    docstring)."""
    profiles = world.profiles
    if profiles is None:
        return
    for idx in sorted(profiles.profiling()):
        job = world.jobs[idx]
        if job.state is not JobState.PENDING:
            continue
        parts = [(node_id, flavor) for flavor in profiles.todo(idx)
                 if (node_id := _idle_node(world, flavor)) is not None]
        if not parts:
            profiles.end(job)  # (a profile never waits: the job queues as its real gang)
            continue
        p, rate = profiles.pin_concurrent(job, parts)
        world.start(job, p, t_s)
        if job.rate <= 0:  # (no true speed for the mixed copy: it runs on its own clock)
            job.rate = rate
            world.schedule(job.progress_from_s + job.remaining / rate, COMPLETE, idx,
                           job.epoch)
        profiles.observe_started(job, [f for _n, f in parts])


def _idle_node(world: SimWorld, flavor: GpuFlavor) -> str | None:
    """The first node of ``flavor`` (cluster order) with an idle GPU, ``None`` if none."""
    if world.free.total(flavor) <= 0:
        return None
    free = world.free
    return next((n.node_id for n in world.cluster if n.flavor == flavor and free[n.node_id] > 0),
                None)
