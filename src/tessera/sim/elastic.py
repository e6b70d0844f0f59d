"""Elastic jobs in the simulator: progress at goodput, and what a resize costs.

Under an elastic allocation policy (``Policy.elastic``: Sia, Pollux, ``goodput_srpt``) the
decision core may give an elastic job any GPU count of its range and a global batch
(``Placement.global_batch_samples``). The simulator then runs it as Pollux's and Sia's
simulators do:

* **speed** -- the job progresses at its *goodput* on its placement (throughput × statistical
  efficiency at its current progress, best batch for the GPUs it holds, as AdaptDL jobs tune
  their own batch; :class:`~tessera.sched.elastic.goodput.GoodputModel`), converted to the
  job's steps (``ElasticRange.target_samples`` ↔ ``spec.total_steps``);
* **re-evaluation** -- the speed is set when the job starts, resizes or moves, and re-evaluated
  at every decision round (Sia's and Pollux's 60 s rounds): efficiency changes with progress
  only from one epoch of the validation curves to the next, so a round-long lag is a small
  fraction of an epoch for every model here. A changed speed re-books the job's completion;
* **cost** -- every start, resize (new GPU count), migration (same count, other GPUs) and
  resume after a preemption holds the new GPUs for the model's checkpoint-restore time as Sia's
  simulator charges it (:data:`~tessera.sched.elastic.goodput.RESCALE_S`, 25-250 s; its
  policy assumes the shorter :data:`~tessera.sched.elastic.goodput.RESTART_S` for cifar10 and
  yolov3) instead of the rigid ``checkpoint_s + restore_s`` (the first start too: Sia's
  simulator charges a job's start-up like any re-allocation); resizes are counted apart from
  migrations;
* **calibration** -- the true speed is the profile's divided by ``ElasticRange.slowdown``
  (Sia's simulator slows its models 1.2-1.8×, :func:`tessera.workload.elastic.sia_calibrated`);
  policies plan with the profile.

Rigid jobs, and every job under a policy that does not size jobs, take none of these paths.
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.model.jobs import JobState
from tessera.sched.core.snapshot import Placement
from tessera.sched.elastic.goodput import GoodputModel, rescale_s
from tessera.sim.state import SimJob

Schedule = Callable[[float, int, int, int], None]


class ElasticRuns:
    """Speeds and restart costs of elastic jobs in one simulation (see the module docstring)."""

    def __init__(self) -> None:
        self.model = GoodputModel()
        self._running: dict[int, SimJob] = {}

    @staticmethod
    def sized(p: Placement) -> bool:
        """Whether ``p`` is an elastic placement (runs at goodput)."""
        return p.global_batch_samples is not None

    def begin(self, job: SimJob, p: Placement) -> float:
        """``job`` starts a run on ``p``: its steps/s at its progress now. It is registered for
        :meth:`refresh`, and a *first* start also pays the model's restart time (Sia's and
        Pollux's simulators charge the start-up like any re-allocation)."""
        self._running[job.idx] = job
        if job.first_start_s is None and job.spec.elastic is not None:
            job.startup_s = rescale_s(job.spec.elastic)
        return self.model.steps_per_s(job.spec, p, self._progress(job))

    def restart_s(self, job: SimJob, default_s: float) -> float:
        """What the next start of ``job`` after a stop costs: its model's checkpoint-restore
        time if it is elastic, else ``default_s``."""
        e = job.spec.elastic
        return default_s if e is None else rescale_s(e)

    def moved(self, job: SimJob, new: Placement) -> None:
        """Count a running job's new placement as a resize or a migration."""
        old = job.placement
        if old is not None and old.num_gpus != new.num_gpus:
            job.resizes += 1
        else:
            job.migrations += 1

    def refresh(self, t_s: float, schedule: Schedule, complete_kind: int,
                fail_kind: int) -> None:
        """Re-evaluate every running elastic job's speed at ``t_s`` (progress since its last
        book is settled first); a changed speed re-books its completion and, if the run has a
        failure booked (``SimJob.fail_at_s``), that failure too: re-booking gives the run a new
        epoch, which makes every event booked under the old one stale. The failure keeps its
        time (a crash does not move because the job sped up); if the job now finishes first,
        the completion wins and the failure is dropped as stale."""
        gone = [i for i, j in self._running.items()
                if j.state is not JobState.RUNNING or j.placement is None
                or not self.sized(j.placement)]
        for i in gone:
            del self._running[i]
        for job in self._running.values():
            p = job.placement
            assert p is not None
            job.advance(t_s)
            rate = self.model.steps_per_s(job.spec, p, self._progress(job))
            if rate == job.rate or rate <= 0:
                continue
            job.rate = rate
            job.epoch += 1
            job.view = None
            schedule(max(job.progress_from_s, t_s) + job.remaining / rate, complete_kind,
                     job.idx, job.epoch)
            if job.fail_at_s is not None:
                schedule(max(job.fail_at_s, t_s), fail_kind, job.idx, job.epoch)

    @staticmethod
    def _progress(job: SimJob) -> float:
        e = job.spec.elastic
        assert e is not None
        done = 1.0 - job.remaining / job.spec.total_steps
        return e.target_samples * min(max(done, 0.0), 1.0)


def book_move(runs: ElasticRuns | None, job: SimJob, new: Placement, default_s: float) -> None:
    """Book a running job's move to ``new`` before it stops: a migration costing ``default_s``
    (no elastic policy), or, under one, a resize or migration at its restart cost."""
    if runs is None:
        job.migrations += 1
        job.startup_s = default_s
        return
    runs.moved(job, new)
    job.startup_s = runs.restart_s(job, default_s)
