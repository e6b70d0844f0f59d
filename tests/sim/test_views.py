"""The world's view book: every snapshot is exactly the active jobs' views, built fresh.

The book rebuilds only the views of jobs that changed (:mod:`tessera.sim.views`); these tests
check, at every decision of whole runs (event and round drivers, preemptions, failures with
retries, Gavel's loop), that its snapshot equals one built from scratch, in the same order,
and that its running/waiting split matches the jobs' states.
"""

from __future__ import annotations

import pytest

from tessera.model.jobs import JobState
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import JobSplit, JobView, Snapshot
from tessera.sim.config import FailureConfig, SimConfig
from tessera.sim.state import SimJob
from tessera.sim.views import ViewBook
from tests.builders import busy_simulator, make_cluster, make_job


def _checked_run(policy: str, cfg: SimConfig) -> int:
    """Run ``policy`` and compare every snapshot with a fresh build; returns the checks."""
    sim = busy_simulator(policy, cfg, k80_nodes=2)
    world = sim.world
    checks = 0
    book_snapshot = world.snapshot

    def checked(t_s: float, free_gpus: bool = True) -> Snapshot:
        nonlocal checks
        snap = book_snapshot(t_s, free_gpus)
        fresh = tuple(map(SimJob.to_view, world.active.values()))
        assert snap.jobs == fresh
        assert fresh == tuple(map(_built, world.active.values()))  # (kept views are current)
        assert all(a is b for a, b in zip(snap.jobs, fresh, strict=True))
        split = snap.split()
        assert split == JobSplit.of(fresh)
        assert all(j.state is JobState.RUNNING for j in split.running)
        checks += 1
        return snap

    world.snapshot = checked  # type: ignore[method-assign]
    sim.run()
    return checks


def _built(j: SimJob) -> JobView:
    """``j``'s view built anew from its books (never its kept one)."""
    return JobView(j.spec, j.state, j.remaining, j.placement, j.attained_gpu_s,
                   tuple(j.run_s.items()), j.pending_since_s, j.last_run_end_s, j.attempts,
                   j.last_update_s, j.rate, j.progress_from_s)


_FAILING = FailureConfig(job_failure_rate=0.5, retry_delay_s=30.0)


@pytest.mark.parametrize("policy,mode", [
    ("las", "events"), ("fifo", "events"), ("max_min_fairness", "rounds"),
    ("hetero_srpt", "rounds"), ("hetero_pack", "rounds"),
])
def test_every_snapshot_equals_a_fresh_build(policy: str, mode: str) -> None:
    cfg = SimConfig(scheduler=SchedulerSettings(mode=mode), failures=_FAILING)  # type: ignore[arg-type]
    assert _checked_run(policy, cfg) > 10


def test_gavel_loop_snapshots_equal_a_fresh_build() -> None:
    assert _checked_run("max_min_fairness", SimConfig(compat="gavel")) > 10


def test_book_follows_changes_it_was_not_told_of() -> None:
    """A job removed from the active set without a word still leaves the next snapshot."""
    jobs = [SimJob(make_job(f"j{i}"), i, 0) for i in range(3)]
    book = ViewBook(jobs)
    active = {j.idx: j for j in jobs}
    for j in jobs:
        book.touch(j.idx)
    assert [v.job_id for v in book.split(active).jobs] == ["j0", "j1", "j2"]
    del active[1]
    assert [v.job_id for v in book.split(active).jobs] == ["j0", "j2"]
    active = {0: jobs[0], 1: jobs[1], 2: jobs[2]}
    assert [v.job_id for v in book.split(active).jobs] == ["j0", "j1", "j2"]
    jobs[2].remaining = 5.0
    jobs[2].view = None
    assert book.split(active).jobs[2].remaining_steps == 5.0


def test_a_split_of_other_jobs_is_never_trusted() -> None:
    jobs = [SimJob(make_job(f"j{i}"), i, 0) for i in range(2)]
    views = tuple(j.to_view() for j in jobs)
    wrong = JobSplit(views[:1], views[:1], ())
    snap = Snapshot(0.0, make_cluster().node("v100", gpus=4).build(), views, split_hint=wrong)
    assert snap.split() == JobSplit(views, (), views)


def test_active_jobs_stay_in_index_order_and_report_every_change() -> None:
    jobs = [SimJob(make_job(f"j{i}"), i, 0) for i in range(4)]
    book = ViewBook(jobs)
    active = book.active_jobs()
    for i in (0, 2, 3):
        active[i] = jobs[i]
    assert [v.job_id for v in book.split(active).jobs] == ["j0", "j2", "j3"]
    active[1] = jobs[1]  # a retry rejoins among later jobs
    del active[3]
    assert list(active) == [0, 1, 2]
    assert [v.job_id for v in book.split(active).jobs] == ["j0", "j1", "j2"]
    active.pop(0)
    assert [v.job_id for v in book.split(active).waiting] == ["j1", "j2"]
    with pytest.raises(TypeError, match="item assignment, del and pop only"):
        active.update({3: jobs[3]})
