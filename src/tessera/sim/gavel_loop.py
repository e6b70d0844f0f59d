"""Gavel's simulation loop, for ``compat="gavel"`` runs (see ``docs/gavel-compat.md``).

Gavel advances time differently from Tessera's own loop: a round ends at the *latest* finish of
the jobs dispatched in it, each dispatched job runs ``min(int(rate·round), remaining)`` steps,
arrivals join only at round boundaries, and an idle cluster jumps to the next arrival. The
decisions still come from the one decision core (``Simulator._timed_decide``); only the clock
and the crediting of progress follow Gavel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.model.jobs import JobId, JobState
from tessera.sched.policies.gavel_compat import gavel_boundary
from tessera.sched.snapshot import Snapshot
from tessera.sim.metrics import Sample
from tessera.sim.state import SimJob

if TYPE_CHECKING:
    from tessera.sim.engine import Simulator


def run_gavel(sim: Simulator) -> None:
    """Gavel's ``Scheduler.simulate`` in trace mode (``docs/gavel-compat.md``).

    Each iteration is one boundary: jump to the *latest* finish of the jobs dispatched last
    round (or, if none ran, to the next arrival); credit each micro-task (steps, and the
    time since the round start for priorities); add the arrivals (JCT still counts from the
    true arrival); ask the decision core for the next round; dispatch each chosen job for
    ``min(int(rate·round), remaining)`` steps, finishing at ``now + steps / rate``.
    """
    jobs = sim.jobs
    n = len(jobs)
    round_s = sim.cfg.round_s
    ptr = 0
    done = 0
    now = jobs[0].spec.submit_time_s if n else 0.0
    round_start = 0.0
    round_end: float | None = None
    # (finish_s, job, steps, flavor) dispatched last iteration.
    dispatched: list[tuple[float, SimJob, float, str]] = []
    failures: dict[int, int] = {}
    stalls = 0
    horizon = sim.cfg.max_sim_time_s
    while done < n:
        nxt = jobs[ptr].spec.submit_time_s if ptr < n else None
        drained = nxt is None and not dispatched
        if dispatched:
            latest = max(d[0] for d in dispatched)
            if round_end is not None:
                round_start = round_end
            round_end = latest
            now = latest
        elif nxt is not None:
            now = nxt
        if horizon is not None and now > horizon:
            break
        _tick(sim, now, dispatched)
        event = False
        credits: list[tuple[JobId, str, float]] = []
        for finish, job, steps, fl in dispatched:
            sim.c.events += 1
            job.state = JobState.PENDING
            job.placement = None
            job.rate = 0.0
            job.last_run_end_s = finish
            job.view = None
            exec_s = finish - round_start
            g = job.spec.num_gpus
            per_worker = steps // g if g > 1 else steps
            if per_worker <= 0 or exec_s <= 0:
                # Gavel's failed micro-task: nothing credited; dropped after 5 in a row.
                event = True
                job.attempts += 1
                failures[job.idx] = failures.get(job.idx, 0) + 1
                if failures[job.idx] >= 5:
                    job.state = JobState.FAILED
                    job.finish_s = finish
                    del sim.active[job.idx]
                    sim._close_ftf(job)
                    done += 1
                continue
            failures[job.idx] = 0
            job.remaining = max(job.remaining - steps, 0.0)
            credits.append((job.spec.job_id, fl, exec_s))
            if job.remaining <= 0:
                event = True
                job.state = JobState.SUCCEEDED
                job.finish_s = finish
                del sim.active[job.idx]
                sim._close_ftf(job)
                done += 1
        sim.running.clear()
        while ptr < n and jobs[ptr].spec.submit_time_s <= now:
            job = jobs[ptr]
            sim._arrive(job, job.spec.submit_time_s)
            done += job.rejected is not None
            ptr += 1
            sim.c.events += 1
            event = True
        if done >= n:
            break
        sim.policy_state = gavel_boundary(sim.policy_state, credits, event, drained)
        dispatched = _dispatch(sim, now, round_s)
        if dispatched or event or ptr < n:
            stalls = 0
        else:
            stalls += 1
            if stalls > 2:  # Gavel would spin here forever; stop with jobs unfinished
                break
        if sim.progress is not None and event:
            sim.progress(done, n)
    sim.last_t = max(sim.last_t, now)

def _tick(
    sim: Simulator, now: float, dispatched: list[tuple[float, SimJob, float, str]]
) -> None:
    """Samples and the active-job integral up to ``now`` (progress is credited per round)."""
    if now > sim.last_t:
        sim.active_integral += len(sim.active) * (now - sim.last_t)
    while now >= sim.next_sample_s and now > sim.last_t:
        t = sim.next_sample_s
        live = [(f, j) for f, j, _s, _fl in dispatched if f > t]
        sim.samples.append(
            Sample(t, sum(j.spec.num_gpus for _f, j in live),
                   len(sim.active) - len(dispatched), len(live))
        )
        sim.next_sample_s += sim.cfg.sample_every_s
    sim.last_t = max(sim.last_t, now)

def _dispatch(
    sim: Simulator, now: float, round_s: float
) -> list[tuple[float, SimJob, float, str]]:
    snap = Snapshot(
        now_s=now,
        cluster=sim.cluster,
        jobs=tuple(j.to_view() for j in sim.active.values()),
        policy_state=sim.policy_state,
        round_s=round_s,
    )
    d = sim._timed_decide(snap)
    by_id = {j.spec.job_id: j for j in sim.active.values()}
    out: list[tuple[float, SimJob, float, str]] = []
    for jid, p in d.placements.items():
        job = by_id[jid]
        rate = sim.truth.rate(job.spec, p.flavor, True)  # Gavel: consolidated, always
        if rate <= 0:
            continue
        steps = float(min(int(rate * round_s), job.remaining))
        finish = now + steps / rate
        job.state = JobState.RUNNING
        job.placement = p
        job.rate = rate
        job.view = None
        if job.first_start_s is None:
            job.first_start_s = now
        busy = finish - now
        g = job.spec.num_gpus
        job.attained_gpu_s += g * busy
        job.run_s[p.flavor] = job.run_s.get(p.flavor, 0.0) + busy
        job.busy_gpu_s[p.flavor] = job.busy_gpu_s.get(p.flavor, 0.0) + g * busy
        sim.running[job.idx] = job
        out.append((finish, job, steps, p.flavor))
    return out

