"""Between rounds, a job's next bootstrap profile takes an idle GPU of its flavor at once.

Under round-based scheduling (``--mode rounds``, 360 s rounds by default) a job that finishes
one of its short bootstrap profiles (:mod:`tessera.sim.bootstrap`) would otherwise wait for
the next round before its next profile -- five minutes of idle waiting for a one-minute
measurement, three times per job. So when a profile ends between rounds, the round driver
asks the decision core once more, *fill-only* (idle GPUs, nobody preempted or moved, the
policy's memory left as the last round set it), about the jobs whose next profile is due:
the snapshot holds the running jobs and those jobs only, so no other waiting job is placed
out of turn. A profile that finds no idle GPU of its flavor waits for the next round like any
job; a job back from its last profile waits for the next round for its real gang.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.model.jobs import JobState
from tessera.sim.world import SimWorld


def fill_profiles(world: SimWorld, t_s: float, place: bool = True) -> None:
    """Place the profiles that became due since the last call into idle GPUs (``place``);
    without ``place`` (a full round just decided about them) only forget them."""
    profiles = world.profiles
    if profiles is None:
        return
    due = profiles.take_due()
    if not place or not due or not any(v > 0 for v in world.free.values()):
        return
    snap = world.snapshot(t_s)
    jobs = tuple(v for v in snap.jobs
                 if v.state is JobState.RUNNING or v.spec.job_id in due)
    if len(jobs) == len(world.running):
        return
    state = world.policy_state
    d = world.decide(replace(snap, jobs=jobs, split_hint=None), world.fill_opts)
    world.policy_state = state
    world.apply(d, t_s)
