"""Leases of two jobs sharing GPUs in Gavel's loop (packing policies under ``--compat gavel``).

A packed pair runs one round on one gang at the pair speeds Gavel measured. As in Gavel's
``_get_job_steps_and_finish_times`` each job runs ``min(int(pair_rate·round), remaining)``
steps and the lease ends at the *later* of the two finishes; both jobs are stamped with that
end (Gavel's ``_per_job_latest_timestamps``), so a job that completes inside a pair completes at
the pair's end. A micro-task in which either job runs less than one step per GPU fails: nothing
is credited, and (as in Gavel, which counts failures of single jobs only) nobody's failure count
moves. The pair's time is credited once, to the pair (see :mod:`tessera.sched.gavel.packed`).
"""

from __future__ import annotations

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobState
from tessera.perf.colocation import PairRefusal, pair_rates
from tessera.sched.core.snapshot import Placement
from tessera.sched.gavel.packed import id_key
from tessera.sim.state import SimJob, move
from tessera.sim.world import SimWorld

PairLease = tuple[float, tuple[SimJob, SimJob], tuple[float, float], GpuFlavor]
"""``(finish_s, (job_a, job_b), (steps_a, steps_b), flavor)`` of two jobs sharing GPUs for one
round, ``job_a`` first in Gavel's id order."""


def start_pair_lease(
    world: SimWorld, job: SimJob, other: SimJob, p: Placement, now_s: float, round_s: float,
) -> PairLease | None:
    """Lease ``p`` to ``job`` and ``other`` for a round, or ``None`` when the lease was already
    made from the other job's side (or the pair may not run)."""
    a, b = (job, other) if id_key(job.spec.job_id) < id_key(other.spec.job_id) else (
        other, job)
    if job is not a:
        return None  # the pair is leased once, from its first job
    rates = pair_rates(world.truth.table, a.spec, b.spec, p.flavor)
    if isinstance(rates, PairRefusal):
        return None
    both = (rates.first_steps_per_s, rates.second_steps_per_s)
    steps = (float(min(int(both[0] * round_s), a.remaining)),
             float(min(int(both[1] * round_s), b.remaining)))
    finish = now_s + max(steps[0] / both[0], steps[1] / both[1])
    busy = finish - now_s
    g = a.spec.num_gpus
    for k, j in enumerate((a, b)):
        move(j, JobState.ADMITTED)
        move(j, JobState.RUNNING)
        j.placement = p
        j.rate = both[k]
        j.view = None
        if j.first_start_s is None:
            j.first_start_s = now_s
        j.attained_gpu_s += g * busy
        j.run_s[p.flavor] = j.run_s.get(p.flavor, 0.0) + busy
        world.running[j.idx] = j
    a.busy_gpu_s[p.flavor] = a.busy_gpu_s.get(p.flavor, 0.0) + g * busy  # the GPUs, once
    return (finish, (a, b), steps, p.flavor)


def end_pair_lease(world: SimWorld, lease: PairLease, exec_s: float) -> tuple[int, bool]:
    """Close a pair's lease; returns (jobs done for good, whether the micro-task succeeded)."""
    finish, jobs, steps, _fl = lease
    g = jobs[0].spec.num_gpus
    ok = exec_s > 0 and all((s // g if g > 1 else s) > 0 for s in steps)
    done = 0
    for j, s in zip(jobs, steps, strict=True):
        j.placement = None
        j.rate = 0.0
        j.last_run_end_s = finish
        j.view = None
        if ok:
            j.remaining = max(j.remaining - s, 0.0)
        if ok and j.remaining <= 0:
            move(j, JobState.SUCCEEDED)
            j.finish_s = finish
            del world.active[j.idx]
            world.close_ftf(j)
            done += 1
        else:
            if not ok:
                j.attempts += 1
            move(j, JobState.PREEMPTED)
            move(j, JobState.PENDING)
    return done, ok
