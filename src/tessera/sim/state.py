"""The simulator's mutable record of one job, and how it advances in virtual time.

A round-based run catches many running jobs up at once: :mod:`tessera.sim.catchup`. Only the
simulator mutates these; the decision core sees frozen :class:`JobView` copies, rebuilt
only when a job changed (pending jobs' views are reused between rounds, which keeps large queues
cheap).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec, JobState, transition
from tessera.sched.core.decide import PendingKind
from tessera.sched.core.snapshot import JobView, Placement
from tessera.sim.steps import steps_from, whole_gang_steps

_RUNNING = JobState.RUNNING

_VIEW_FIELDS = ("spec", "state", "remaining_steps", "placement", "attained_gpu_s",
                "run_s_by_flavor", "pending_since_s", "last_run_end_s", "attempts", "as_of_s",
                "progress_rate", "progress_from_s", "noise_scale_samples",
                "step_fits")
if tuple(f.name for f in fields(JobView)) != _VIEW_FIELDS:  # (new_view must set every field)
    raise ImportError("JobView's fields changed: update tessera.sim.state.new_view")
(_set_spec, _set_state, _set_remaining, _set_placement, _set_attained, _set_run_s,
 _set_pending_since, _set_last_run_end, _set_attempts, _set_as_of, _set_rate,
 _set_progress_from, _set_gns, _set_fits) = (vars(JobView)[name].__set__ for name in _VIEW_FIELDS)
_new = object.__new__


def new_view(
    spec: JobSpec, state: JobState, remaining_steps: float, placement: Placement | None,
    attained_gpu_s: float, run_s_by_flavor: tuple[tuple[GpuFlavor, float], ...],
    pending_since_s: float, last_run_end_s: float | None, attempts: int, as_of_s: float,
    progress_rate: float, progress_from_s: float,
) -> JobView:
    """``JobView(...)`` with every field given in order: the same value, built by setting its
    slots directly. A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; in rounds every running job's view is rebuilt every round (a few
    hundred per round on the full Philly table), and this costs half as much."""
    v = _new(JobView)
    _set_spec(v, spec)
    _set_state(v, state)
    _set_remaining(v, remaining_steps)
    _set_placement(v, placement)
    _set_attained(v, attained_gpu_s)
    _set_run_s(v, run_s_by_flavor)
    _set_pending_since(v, pending_since_s)
    _set_last_run_end(v, last_run_end_s)
    _set_attempts(v, attempts)
    _set_as_of(v, as_of_s)
    _set_rate(v, progress_rate)
    _set_progress_from(v, progress_from_s)
    _set_gns(v, None)  # (a simulated agent's reports are laid over them: tessera.sim.gns_agent)
    _set_fits(v, ())
    return v


class SimJob:
    """Mutable simulation state of one job."""

    __slots__ = (
        "_view",
        "attained_gpu_s",
        "attempts",
        "busy_gpu_s",
        "contention_s",
        "epoch",
        "fail_at_s",
        "finish_s",
        "first_start_s",
        "flaky",
        "idx",
        "last_run_end_s",
        "last_update_s",
        "lost_gpu_s",
        "max_retries",
        "migrations",
        "pending_s",
        "pending_since_s",
        "placement",
        "preemptions",
        "progress_from_s",
        "rate",
        "rejected",
        "remaining",
        "resizes",
        "run_s",
        "run_started_s",
        "spec",
        "stale",
        "startup_s",
        "state",
        "wait_by_kind",
        "wait_kind",
        "wait_since_s",
    )

    def __init__(self, spec: JobSpec, idx: int, max_retries: int) -> None:
        self.spec = spec
        self.idx = idx
        self.state = JobState.PENDING
        self.remaining = spec.total_steps
        self.placement: Placement | None = None
        self.rate = 0.0
        self.progress_from_s = 0.0
        self.run_started_s = 0.0
        self.last_update_s = spec.submit_time_s
        self.attained_gpu_s = 0.0
        self.run_s: dict[GpuFlavor, float] = {}
        self.busy_gpu_s: dict[GpuFlavor, float] = {}
        self.pending_since_s = spec.submit_time_s
        # Time pending over all pending spells (before the first start, after preemptions,
        # retries and validation), booked when the job starts or the run ends.
        self.pending_s = 0.0
        self.last_run_end_s: float | None = None
        self.attempts = 0
        self.preemptions = 0
        self.migrations = 0
        self.resizes = 0
        self.first_start_s: float | None = None
        self.finish_s: float | None = None
        self.epoch = 0
        self.flaky = False
        self.fail_at_s: float | None = None
        self.lost_gpu_s = 0.0
        self.startup_s = 0.0
        self.rejected: str | None = None
        self.wait_kind: PendingKind | None = None
        self.wait_since_s = spec.submit_time_s
        self.wait_by_kind: dict[PendingKind, float] = {}
        self.max_retries = max_retries
        self.contention_s = 0.0
        self._view: JobView | None = None
        self.stale: dict[int, None] | None = None

    @property
    def view(self) -> JobView | None:
        """The job's last frozen view, ``None`` once anything in it changed."""
        return self._view

    @view.setter
    def view(self, value: JobView | None) -> None:
        # Dropping the view also tells the owner of ``stale`` (the world's view book,
        # :class:`~tessera.sim.views.ViewBook`) that this job's view must be rebuilt.
        self._view = value
        if value is None and self.stale is not None:
            self.stale[self.idx] = None

    def advance(self, now_s: float) -> None:
        """Account for time passing up to ``now_s`` (progress only while running)."""
        last = self.last_update_s
        dt = now_s - last
        if dt <= 0:
            return
        p = self.placement
        if p is not None and self.state is _RUNNING:
            g = self.spec.num_gpus if p.global_batch_samples is None else p.num_gpus
            self.attained_gpu_s += g * dt
            run_s = self.run_s
            busy = self.busy_gpu_s
            if p.is_mixed:
                # A mixed gang's time counts on each of its flavors by its share of the gang.
                for fl, n in p.flavor_counts():
                    run_s[fl] = run_s.get(fl, 0.0) + (dt if n == g else dt * n / g)
                    busy[fl] = busy.get(fl, 0.0) + n * dt
            else:
                fl = p.flavor
                n = p.num_gpus
                run_s[fl] = run_s.get(fl, 0.0) + (dt if n == g else dt * n / g)
                busy[fl] = busy.get(fl, 0.0) + n * dt
            # (same arithmetic as max(); the order of operations is part of the results)
            pf = self.progress_from_s
            start = pf if pf > last else last
            if now_s > start:
                left = self.remaining - self.rate * (now_s - start)
                self.remaining = 0.0 if left < 0.0 else left
            self.view = None  # (a view extrapolates from last_update_s; rebuild from here)
        self.last_update_s = now_s

    def advance_each(self, times: Sequence[float],
                     steps: dict[float, tuple[list[float], float]] | None = None) -> None:
        """``advance(t)`` for each ``t`` of ``times`` in order, with the same result bit for bit,
        in one call: a driver that advances every running job at every event can instead
        collect the event times and let each job catch up when it is next looked at.

        ``steps`` (optional, one dict per ``times``) caches, per starting time, the positive
        differences ``t - last`` that ``advance`` would compute one after the other: every
        running job of a round starts from the same last update, so the differences are taken
        once per round instead of once per job (see :func:`steps_from`).
        """
        p = self.placement
        if p is None or self.state is not _RUNNING or p.is_mixed:
            for t in times:
                self.advance(t)
            return
        last = self.last_update_s
        g = self.spec.num_gpus if p.global_batch_samples is None else p.num_gpus
        fl = p.flavor
        n = p.num_gpus
        pf = self.progress_from_s
        if n == g and pf <= last:
            # Progress has begun and the gang is whole: each step adds ``dt`` to the flavor's
            # run time and takes ``rate * dt`` off the work left (``t - start`` is ``dt``).
            hit = steps.get(last) if steps is not None else None
            if hit is None:
                hit = steps_from(times, last)
                if steps is not None:
                    steps[last] = hit
            dts, end = hit
            if not dts:
                return
            attained, run_s, busy, remaining = whole_gang_steps(
                dts, g, n, self.rate, self.attained_gpu_s, self.run_s.get(fl, 0.0),
                self.busy_gpu_s.get(fl, 0.0), self.remaining)
            self.attained_gpu_s = attained
            self.remaining = remaining
            self.run_s[fl] = run_s
            self.busy_gpu_s[fl] = busy
            self.last_update_s = end
            self.view = None
            return
        whole = n == g
        rate = self.rate
        attained = self.attained_gpu_s
        remaining = self.remaining
        run_s = self.run_s.get(fl, 0.0)
        busy = self.busy_gpu_s.get(fl, 0.0)
        moved = False
        for t in times:
            dt = t - last
            if dt <= 0:
                continue
            attained += g * dt
            run_s = run_s + (dt if whole else dt * n / g)
            busy = busy + n * dt
            start = pf if pf > last else last
            if t > start:
                left = remaining - rate * (t - start)
                remaining = 0.0 if left < 0.0 else left
            last = t
            moved = True
        if moved:
            self.attained_gpu_s = attained
            self.remaining = remaining
            self.run_s[fl] = run_s
            self.busy_gpu_s[fl] = busy
            self.last_update_s = last
            self.view = None

    def set_wait(self, kind: PendingKind | None, now_s: float) -> None:
        """Record why the job waits from ``now_s`` on (None: it runs)."""
        if self.wait_kind is not None and now_s > self.wait_since_s:
            k = self.wait_kind
            self.wait_by_kind[k] = self.wait_by_kind.get(k, 0.0) + now_s - self.wait_since_s
        self.wait_kind = kind
        self.wait_since_s = now_s

    def to_view(self) -> JobView:
        view = self._view
        if view is None:
            # (every field, in order, set directly: built for every running job every round)
            view = self._view = new_view(
                self.spec, self.state, self.remaining, self.placement, self.attained_gpu_s,
                tuple(self.run_s.items()), self.pending_since_s, self.last_run_end_s,
                self.attempts, self.last_update_s, self.rate, self.progress_from_s,
            )
        return view


def move(job: SimJob, new: JobState) -> None:
    """Change ``job``'s state through the lifecycle table (raises on an illegal change)."""
    job.state = transition(job.state, new)
