"""Gavel's simulation loop, for ``compat="gavel"`` runs (see ``docs/gavel-compat.md``).

Gavel advances time differently from Tessera's own drivers: a round ends at the *latest* finish
of the jobs dispatched in it, each dispatched job runs ``min(int(rate·round), remaining)``
steps, arrivals join only at round boundaries, and an idle cluster jumps to the next arrival.
The decisions still come from the one decision core (through the world); only the clock and
the crediting of progress follow Gavel. Each dispatch is a lease for one round: at the round's
end the job succeeds, fails for good, or is requeued (its lease ends like a preemption, at no
cost, as in Gavel), and the next round leases the GPUs again.
"""

from __future__ import annotations

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.policy import Policy
from tessera.sched.gavel.compat import gavel_boundary, gavel_compat_policy
from tessera.sim.config import SimConfig
from tessera.sim.drivers.base import Driver
from tessera.sim.drivers.gavel_pairs import PairLease, end_pair_lease, start_pair_lease
from tessera.sim.metrics import Sample
from tessera.sim.state import SimJob, move
from tessera.sim.world import SimWorld

_MAX_FAILED_MICROTASKS = 5
"""Gavel drops a job after this many failed micro-tasks in a row."""

Lease = tuple[float, SimJob, float, GpuFlavor]
"""``(finish_s, job, steps, flavor)`` of one job dispatched for one round."""



class GavelDriver(Driver):
    """Gavel's ``Scheduler.simulate`` in trace mode (see the module docstring)."""

    name = "gavel"
    split_large_gangs = False

    def policy_for(self, policy: Policy, config: SimConfig) -> Policy:
        return gavel_compat_policy(policy, config.seed, config.compat_solver)

    def uses_rounds(self) -> bool:
        return True

    def run(self, world: SimWorld) -> None:
        """Each iteration is one boundary: jump to the *latest* finish of the jobs dispatched
        last round (or, if none ran, to the next arrival); credit each micro-task (steps, and
        the time since the round start for priorities); add the arrivals (JCT still counts
        from the true arrival); ask the decision core for the next round; dispatch each chosen
        job for ``min(int(rate·round), remaining)`` steps, finishing at ``now + steps / rate``.
        """
        jobs = world.jobs
        n = len(jobs)
        round_s = world.sched.round_s
        ptr = 0
        done = 0
        now_s = jobs[0].spec.submit_time_s if n else 0.0
        round_start = 0.0
        round_end: float | None = None
        dispatched: list[Lease] = []
        pairs: list[PairLease] = []
        failures: dict[int, int] = {}
        stalls = 0
        horizon = world.cfg.max_sim_time_s
        while done < n:
            nxt = jobs[ptr].spec.submit_time_s if ptr < n else None
            drained = nxt is None and not dispatched and not pairs
            if dispatched or pairs:
                latest = max([d[0] for d in dispatched] + [d[0] for d in pairs])
                if round_end is not None:
                    round_start = round_end
                round_end = latest
                now_s = latest
            elif nxt is not None:
                now_s = nxt
            if horizon is not None and now_s > horizon:
                break
            _tick(world, now_s, dispatched + [(f, js[0], st[0], fl) for f, js, st, fl in pairs])
            event = False
            credits: list[tuple[JobId | tuple[JobId, ...], GpuFlavor, float]] = []
            for finish, job, steps, fl in dispatched:
                world.c.events += 1
                ended, credited = _end_lease(world, job, finish, steps, finish - round_start,
                                             failures)
                done += ended
                event |= ended or not credited
                if credited:
                    credits.append((job.spec.job_id, fl, finish - round_start))
            for lease in pairs:
                world.c.events += 2
                ended_n, credited = end_pair_lease(world, lease, lease[0] - round_start)
                done += ended_n
                event |= ended_n > 0 or not credited
                if credited:
                    ids = (lease[1][0].spec.job_id, lease[1][1].spec.job_id)
                    credits.append((ids, lease[3], lease[0] - round_start))
            world.running.clear()
            while ptr < n and jobs[ptr].spec.submit_time_s <= now_s:
                job = jobs[ptr]
                world.arrive(job, job.spec.submit_time_s)
                done += job.rejected is not None
                ptr += 1
                world.c.events += 1
                event = True
            if done >= n:
                break
            world.policy_state = gavel_boundary(world.policy_state, credits, event, drained)
            dispatched, pairs = _dispatch(world, now_s, round_s)
            if dispatched or pairs or event or ptr < n:
                stalls = 0
            else:
                stalls += 1
                if stalls > 2:  # Gavel would spin here forever; stop with jobs unfinished
                    break
            if world.progress is not None and event:
                world.progress(done, n)
        # Leases still open at the horizon were credited by Gavel's books per round already.
        world.running.clear()
        world.last_t = max(world.last_t, now_s)


def _end_lease(
    world: SimWorld, job: SimJob, finish: float, steps: float, exec_s: float,
    failures: dict[int, int],
) -> tuple[bool, bool]:
    """Close ``job``'s lease at ``finish``; returns (the job is done for good, steps credited).

    A micro-task that ran no whole step per worker is Gavel's failed micro-task: nothing is
    credited, and after :data:`_MAX_FAILED_MICROTASKS` in a row the job fails for good.
    """
    leased_rate = job.rate
    job.placement = None
    job.rate = 0.0
    job.last_run_end_s = finish
    job.view = None
    g = job.spec.num_gpus
    per_worker = steps // g if g > 1 else steps
    if per_worker <= 0 or exec_s <= 0:
        job.attempts += 1
        failures[job.idx] = failures.get(job.idx, 0) + 1
        if failures[job.idx] >= _MAX_FAILED_MICROTASKS:
            move(job, JobState.FAILED)
            _retire(world, job, finish)
            return True, False
        _requeue(job)
        return False, False
    failures[job.idx] = 0
    job.remaining = max(job.remaining - steps, 0.0)
    profiles = world.profiles
    if profiles is not None and job.idx in profiles:  # (a bootstrap profile: sim/bootstrap)
        world.add("bootstrap_gpu_h", steps / leased_rate / 3600 if leased_rate > 0 else 0.0)
        if job.remaining <= 0 and not profiles.next(job) and job.remaining <= 0:
            move(job, JobState.SUCCEEDED)  # (its profiles did all its work: lean mode)
            _retire(world, job, finish)
            return True, False
        _requeue(job)
        return False, False  # (the policy never saw the profile: nothing to credit)
    if job.remaining <= 0:
        move(job, JobState.SUCCEEDED)
        _retire(world, job, finish)
        return True, True
    _requeue(job)
    return False, True


def _requeue(job: SimJob) -> None:
    """The lease ended with work left: back to the queue for the next round."""
    move(job, JobState.PREEMPTED)
    move(job, JobState.PENDING)


def _retire(world: SimWorld, job: SimJob, finish: float) -> None:
    job.finish_s = finish
    del world.active[job.idx]
    world.close_ftf(job)


def _tick(world: SimWorld, now_s: float, dispatched: list[Lease]) -> None:
    """Samples and the active-job integral up to ``now_s`` (progress is credited per round)."""
    if now_s > world.last_t:
        world.active_integral += len(world.active) * (now_s - world.last_t)
    while now_s >= world.next_sample_s and now_s > world.last_t:
        t_s = world.next_sample_s
        live = [(f, j) for f, j, _s, _fl in dispatched if f > t_s]
        world.samples.append(
            Sample(t_s, sum(j.spec.num_gpus for _f, j in live),
                   len(world.active) - len(dispatched), len(live))
        )
        world.next_sample_s += world.cfg.sample_every_s
    world.last_t = max(world.last_t, now_s)


def _dispatch(world: SimWorld, now_s: float, round_s: float
              ) -> tuple[list[Lease], list[PairLease]]:
    """Ask the decision core for the round starting at ``now_s`` and lease the chosen GPUs."""
    d = world.decide(world.snapshot(now_s, free_gpus=False))
    by_id = {j.spec.job_id: j for j in world.active.values()}
    out: list[Lease] = []
    pairs: list[PairLease] = []
    for jid, p in d.placements.items():
        job = by_id[jid]
        if p.colocated_with:
            lease = start_pair_lease(world, job, by_id[p.colocated_with[0]], p, now_s, round_s)
            if lease is not None:
                pairs.append(lease)
            continue
        if world.profiles is not None:  # (a bootstrap profile: pinned to the flavor it got)
            world.profiles.started(job, p.flavor)
        rate = world.truth.rate(job.spec, p.flavor, True)  # Gavel: consolidated, always
        if rate <= 0:
            continue
        steps = float(min(int(rate * round_s), job.remaining))
        finish = now_s + steps / rate
        move(job, JobState.ADMITTED)
        move(job, JobState.RUNNING)
        job.placement = p
        job.rate = rate
        job.view = None
        if job.first_start_s is None:
            job.first_start_s = now_s
        busy = finish - now_s
        g = job.spec.num_gpus
        job.attained_gpu_s += g * busy
        job.run_s[p.flavor] = job.run_s.get(p.flavor, 0.0) + busy
        job.busy_gpu_s[p.flavor] = job.busy_gpu_s.get(p.flavor, 0.0) + g * busy
        world.running[job.idx] = job
        out.append((finish, job, steps, p.flavor))
    return out, pairs
