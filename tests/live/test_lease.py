"""The live swap lease counts from where a run's restore ends, as the simulator's does.

A round-based policy keeps a running gang until it has made checkpoint + restore of progress
(:func:`tessera.sched.core.cadence.leased`). The simulator starts counting when a resumed run's
restore is over; the live service counted from the run's launch, so with 60 s rounds and
checkpoint 30 s + restore 30 s a resumed live run could be swapped out after 30 s of restoring
and 30 s of work, every round (issue 31). These tests replay jobs through the live service on
a moved clock (the harness of ``test_replay_parity``) with an executor whose resumed runs do
spend ``restore_s`` restoring before they progress, and check what each run got done.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tessera.live.executors.base import LaunchSpec
from tessera.live.service import LiveService
from tessera.live.store import Allocation
from tessera.live.view import build_snapshot
from tessera.model.cluster import load_cluster
from tessera.model.jobs import JobState
from tessera.sched.core.settings import SchedulerSettings
from tests.live.test_replay_parity import Clock, ReplayExecutor, _replay

ROUND_S, CHECKPOINT_S, RESTORE_S = 60.0, 30.0, 30.0
SWAP_S = CHECKPOINT_S + RESTORE_S


class RestoringReplayExecutor(ReplayExecutor):
    """A replay executor (runs last exactly their remaining work at 1 step/s) whose runs that
    resume a job -- every run but the job's first -- first restore for ``restore_s``, making
    no progress meanwhile; a stopped run keeps only the progress made after its restore."""

    def __init__(self, clock: Clock, restore_s: float) -> None:
        super().__init__(clock)
        self.restore_s = restore_s
        self.begun: set[str] = set()
        self.progress_from_s: dict[tuple[str, int], float] = {}

    def launch(self, spec: LaunchSpec) -> None:
        super().launch(spec)
        resumes = spec.job_id in self.begun
        self.begun.add(spec.job_id)
        self.progress_from_s[(spec.job_id, spec.run)] = (
            self.clock() + (self.restore_s if resumes else 0.0))

    def _end_s(self, job_id: str, run: int) -> float:
        left = self.work_s[job_id] - self.done_s.get(job_id, 0.0)
        return self.progress_from_s[(job_id, run)] + left

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        start, code = self.runs[(job_id, run)]
        if code is None:
            made = max(self.clock() - self.progress_from_s[(job_id, run)], 0.0)
            self.done_s[job_id] = self.done_s.get(job_id, 0.0) + made
            self.runs[(job_id, run)] = (start, 143)
        return True


def _swapped_runs(svc: LiveService, ex: RestoringReplayExecutor) -> list[tuple[Allocation, float]]:
    """Every run the scheduler stopped, with the progress it made (after any restore)."""
    out = []
    for a in svc.store.allocations(("done",)):
        if a.stop_reason not in ("preempt", "move") or a.started_s is None:
            continue
        assert a.ended_s is not None
        out.append((a, a.ended_s - ex.progress_from_s[(a.job_id, a.run)]))
    return out


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_sum_throughput"])
def test_a_resumed_run_keeps_its_gpus_until_it_progressed_a_swap(
        tmp_path: Path, policy: str) -> None:
    """Two one-GPU jobs on one GPU with 60 s rounds and a 60 s swap: Gavel's round policies
    share the GPU by swapping them, but every run they swap out has made at least checkpoint +
    restore of progress after its restore, as in the simulator; and the jobs finish. (Counting
    the lease from the launch, every run was swapped after one round, a resumed one with 30 s
    of progress for its 60 s: 18 runs, the last job done at 1180 s instead of 910 s.)"""
    settings = SchedulerSettings(round_s=ROUND_S, checkpoint_s=CHECKPOINT_S,
                                 restore_s=RESTORE_S)
    ex = RestoringReplayExecutor(Clock(), RESTORE_S)
    svc, ids, _t0 = _replay(
        tmp_path, policy, settings,
        [(0.0, f"gpus: 1\ncommand: sleep 1\nexpected_duration_s: {d}\ntotal_steps: {d}")
         for d in (300, 400)],
        ex, load_cluster("v100:1", 1))
    for jid in ids:
        rec = svc.store.get(jid)
        assert rec is not None and rec.state.value == "succeeded", jid
    swapped = _swapped_runs(svc, ex)
    resumed = [(a, made) for a, made in swapped if a.run > 1]
    assert resumed, "no resumed run was swapped: the test would check little"
    for a, made in swapped:
        assert made >= SWAP_S - 1e-6, (
            f"{a.job_id} run {a.run} swapped after {made:g} s of progress")


def test_the_view_starts_a_resumed_runs_progress_after_its_restore(tmp_path: Path) -> None:
    """``build_snapshot``: a job's first run progresses from its launch, a resumed run from
    its launch + ``restore_s``."""
    settings = SchedulerSettings(round_s=ROUND_S, checkpoint_s=CHECKPOINT_S,
                                 restore_s=RESTORE_S)
    ex = RestoringReplayExecutor(Clock(), RESTORE_S)
    svc, _ids, _t0 = _replay(
        tmp_path, "max_min_fairness", settings,
        [(0.0, "gpus: 1\ncommand: sleep 1\nexpected_duration_s: 400\ntotal_steps: 400")
         for _ in range(2)],
        ex, load_cluster("v100:1", 1))
    runs = [a for a in svc.store.allocations(("done",)) if a.started_s is not None]
    first = next(a for a in runs if a.run == 1)
    later = next(a for a in runs if a.run > 1)
    for a, expect in ((first, 0.0), (later, RESTORE_S)):
        rec = svc.store.get(a.job_id)
        assert rec is not None and a.started_s is not None
        # Seen while the run held its GPUs (the job running, that run current).
        rec = replace(rec, state=JobState.RUNNING,
                      last_run_end_s=None if a.run == 1 else a.started_s)
        live = replace(a, status="running", ended_s=None)
        snap = build_snapshot(a.started_s + 1.0, svc.cluster, [rec], [live], {}, svc.oracle,
                              None, ROUND_S, RESTORE_S)
        (view,) = snap.jobs
        assert view.progress_from_s == pytest.approx(a.started_s + expect)
