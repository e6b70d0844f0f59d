"""Predictable preemption (issue 32 part 4): the fewest GPUs freed, lowest priority then most
recently started first, the same victims for the same state, never a loop; time sharing inside
a queue with a minimum admitted duration."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.model.jobs import JobState
from tessera.sched.core.quotas import (
    Cohort,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    ReclaimWithinCohort,
    WithinQueue,
)
from tessera.sched.core.snapshot import JobView
from tessera.sched.core.tenancy import FairSharing, Tenancy
from tests.sched.quota_world import V100, cluster, job, pending, run, running

LOWER = QueuePreemption(within_queue=WithinQueue.LOWER_PRIORITY)


def _own(min_admitted_s: float | None = None) -> Tenancy:
    q = QueueQuota.per_flavor("q", {V100: FlavorQuota(8, 0)}, preemption=LOWER,
                              min_admitted_s=min_admitted_s)
    return Tenancy(queues={"q": q})


def test_within_queue_frees_the_fewest_gpus_lowest_priority_first() -> None:
    jobs = [running(job("big", 4, "q", priority=-2), V100, 0.0),
            running(job("low", 2, "q", priority=-1), V100, 1.0),
            running(job("new", 2, "q", priority=-1), V100, 2.0),
            pending(job("hi", 2, "q", 3.0, priority=5))]
    out = run(cluster(1, 0), _own(), *jobs, now_s=4.0)
    # big has the lowest priority and is tried first; freeing it alone is enough
    assert out.preempted == ("big",)
    jobs[0] = running(job("big", 4, "q", priority=0), V100, 0.0)
    out = run(cluster(1, 0), _own(), *jobs, now_s=4.0)
    assert out.preempted == ("new",)  # equal lowest priority: the most recently started


def test_pruning_gives_back_victims_that_were_not_needed() -> None:
    # Lowest priority first: s1 (1 GPU), then b (4 GPUs) -- b alone makes room, s1 goes back.
    jobs = [running(job("s1", 1, "q", priority=-3), V100, 0.0),
            running(job("b", 4, "q", priority=-2), V100, 0.0),
            running(job("c", 3, "q", priority=0), V100, 0.0),
            pending(job("hi", 4, "q", 1.0, priority=5))]
    out = run(cluster(1, 0), _own(), *jobs, now_s=2.0)
    assert out.preempted == ("b",)


def test_same_state_same_victims() -> None:
    jobs = [running(job(f"r{i}", 2, "q", priority=0), V100, 5.0) for i in range(4)]
    jobs.append(pending(job("hi", 4, "q", 1.0, priority=1)))
    first = run(cluster(1, 0), _own(), *jobs, now_s=9.0)
    again = run(cluster(1, 0), _own(), *reversed(jobs), now_s=9.0)
    assert first.preempted == again.preempted and len(first.preempted) == 2


def test_time_sharing_three_whole_queue_jobs_take_turns() -> None:
    """Kueue #8522: three equal 8-GPU jobs on an 8-GPU queue each wait at most 2 x
    min_admitted_s."""
    m = 100.0
    t = _own(min_admitted_s=m)
    views: dict[str, JobView] = {n: pending(job(n, 8, "q", 0.0)) for n in "abc"}
    waited: dict[str, float] = {}
    starts: dict[str, int] = {}
    for step in range(61):
        now = step * 10.0
        d = run(cluster(1, 0), t, *views.values(), now_s=now)
        for n in d.preempted:
            views[n] = pending(views[n].spec, since_s=now)
        for n in d.started:
            waited[n] = max(waited.get(n, 0.0), now - views[n].pending_since_s)
            starts[n] = starts.get(n, 0) + 1
            views[n] = running(views[n].spec, V100, now)
    assert set(starts) == set("abc") and min(starts.values()) >= 2
    assert max(waited.values()) <= 2 * m


def _apply(views: list[JobView], d, now: float) -> list[JobView]:  # type: ignore[no-untyped-def]
    out = []
    for v in views:
        jid = v.spec.job_id
        if jid in d.preempted:
            out.append(replace(v, state=JobState.PENDING, placement=None, pending_since_s=now))
        elif jid in d.started:
            out.append(replace(v, state=JobState.RUNNING, placement=d.placements[jid],
                               progress_from_s=now, as_of_s=now))
        else:
            out.append(v)
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 4), st.integers(0, 2),
                          st.booleans()), min_size=1, max_size=9),
       st.booleans(), st.sampled_from(list(ReclaimWithinCohort)))
def test_no_preemption_loop(jobs: list[tuple[str, int, int, bool]], fair: bool,
                            reclaim: ReclaimWithinCohort) -> None:
    """Within one decision nobody is preempted twice, and a job V preempted to admit X is not
    re-admitted by preempting X in the next round with no change of state (no ping-pong)."""
    pre = QueuePreemption(reclaim_within_cohort=reclaim, within_queue=WithinQueue.LOWER_PRIORITY)
    queues = {n: QueueQuota.per_flavor(n, {V100: FlavorQuota(g)}, cohort="root", preemption=pre)
              for n, g in (("a", 2), ("b", 2), ("c", 4))}
    t = Tenancy(queues=queues, cohorts={"root": Cohort("root")},
                fair_sharing=FairSharing(enabled=fair))
    views: list[JobView] = []
    for i, (q, g, prio, _first) in enumerate(jobs):
        spec = job(f"j{i}", g, q, float(i), priority=prio)
        views.append(pending(spec))
    c = cluster(1, 0)
    d0 = run(c, t, *views, now_s=50.0)  # fill the cluster first
    views = _apply(views, d0, 50.0)
    views += [pending(job(f"late{i}", g, q, 60.0 + i, priority=prio + 1))
              for i, (q, g, prio, _r) in enumerate(jobs[:3])]
    d1 = run(c, t, *views, now_s=70.0)
    assert len(set(d1.preempted)) == len(d1.preempted)
    views = _apply(views, d1, 70.0)
    d2 = run(c, t, *views, now_s=70.0)
    admitted_for = {v: d1.notes[v].split()[3] for v in d1.preempted}
    for v, x in admitted_for.items():
        assert not (v in d2.started and x in d2.preempted), (v, x)
