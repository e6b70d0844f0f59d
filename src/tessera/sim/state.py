"""The simulator's mutable record of one job, and how it advances in virtual time.

Only the simulator mutates these; the decision core sees frozen :class:`JobView` copies, rebuilt
only when a job changed (pending jobs' views are reused between rounds, which keeps large queues
cheap).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields

import numpy as np

from tessera.model.jobs import JobSpec, JobState, transition
from tessera.sched.core.decide import PendingKind
from tessera.sched.core.snapshot import JobView, Placement

_RUNNING = JobState.RUNNING

_VIEW_FIELDS = ("spec", "state", "remaining_steps", "placement", "attained_gpu_s",
                "run_s_by_flavor", "pending_since_s", "last_run_end_s", "attempts", "as_of_s",
                "progress_rate", "progress_from_s")
if tuple(f.name for f in fields(JobView)) != _VIEW_FIELDS:  # (new_view must set every field)
    raise ImportError("JobView's fields changed: update tessera.sim.state.new_view")
(_set_spec, _set_state, _set_remaining, _set_placement, _set_attained, _set_run_s,
 _set_pending_since, _set_last_run_end, _set_attempts, _set_as_of, _set_rate,
 _set_progress_from) = (vars(JobView)[name].__set__ for name in _VIEW_FIELDS)
_new = object.__new__


def new_view(
    spec: JobSpec, state: JobState, remaining_steps: float, placement: Placement | None,
    attained_gpu_s: float, run_s_by_flavor: tuple[tuple[str, float], ...],
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
        self.run_s: dict[str, float] = {}
        self.busy_gpu_s: dict[str, float] = {}
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


def whole_gang_steps(
    dts: Sequence[float], g: int, n: int, rate: float, attained: float, run_s: float,
    busy: float, remaining: float,
) -> tuple[float, float, float, float]:
    """A whole gang's books on one flavor after the steps ``dts`` (``g`` GPUs counted for
    attained service, ``n`` held): ``(attained, run_s, busy, remaining)``, by the operations
    :meth:`SimJob.advance` performs, in its order, so the floats are the same bit for bit."""
    for dt in dts:
        attained += g * dt
        run_s = run_s + dt
        busy = busy + n * dt
        left = remaining - rate * dt
        remaining = 0.0 if left < 0.0 else left
    return attained, run_s, busy, remaining


#: A group of jobs at least this large, catching up at least this many steps, takes its steps
#: as arrays (:func:`_steps_as_arrays`); smaller ones one job at a time. Both perform the same
#: float operations in the same order, so the threshold changes only the speed.
ARRAY_MIN_JOBS = 8
ARRAY_MIN_STEPS = 3


def catch_up(jobs: Iterable[SimJob], times: Sequence[float]) -> None:
    """``job.advance_each(times, steps)`` for each of ``jobs`` with one shared ``steps``, and
    each advanced job's new view built at once: the same books and views bit for bit.

    A round-based run advances every running job every round (a few dozen to a few hundred on
    the full Philly table, at each of 46,000 rounds) through every event time since the last
    round (a job's books are the sums of those steps, in order: the results depend on it), and
    the round's snapshot then rebuilds each one's view. For the common case -- a whole gang on
    one flavor whose progress has begun -- the jobs are grouped by their last update (which
    fixes their steps): a group takes its steps here, as arrays when it is large and the steps
    are several (the same operations element by element), and each job's view is built from
    the values just computed. Every other job goes through :meth:`SimJob.advance_each`. Every
    advanced job notes itself stale in the order of ``jobs``, so the view book sees the order
    it would have seen had each job been advanced in turn.
    """
    steps: dict[float, tuple[list[float], float]] = {}
    groups: dict[float, list[SimJob]] = {}
    for j in jobs:
        p = j.placement
        last = j.last_update_s
        if (p is None or j.state is not _RUNNING or p.is_mixed or j.progress_from_s > last
                or (p.global_batch_samples is None and p.num_gpus != j.spec.num_gpus)):
            j.advance_each(times, steps)
            continue
        group = groups.get(last)
        if group is None:
            hit = steps.get(last)
            if hit is None:
                hit = steps[last] = steps_from(times, last)
            group = groups[last] = []
            if not hit[0]:
                continue
        elif not group:
            continue
        group.append(j)
        stale = j.stale
        if stale is not None:
            stale[j.idx] = None
    for last, group in groups.items():
        if group:
            dts, end = steps[last]
            if len(dts) >= ARRAY_MIN_STEPS and len(group) >= ARRAY_MIN_JOBS:
                _steps_as_arrays(group, dts, end)
            else:
                for j in group:
                    _steps_inline(j, dts, end)


def _steps_inline(j: SimJob, dts: Sequence[float], end: float) -> None:
    """One whole gang's steps ``dts`` on its one flavor (the operations of
    :meth:`SimJob.advance_each`'s short path), its new view built from the values."""
    p = j.placement
    assert p is not None
    n = p.num_gpus
    fl = p.flavor
    rate = j.rate
    attained = j.attained_gpu_s
    remaining = j.remaining
    run_s_of = j.run_s
    busy_of = j.busy_gpu_s
    run_s = run_s_of.get(fl, 0.0)
    busy = busy_of.get(fl, 0.0)
    if len(dts) == 1:  # (most rounds saw no event since the last: one step)
        dt = dts[0]
        attained += n * dt
        run_s = run_s + dt
        busy = busy + n * dt
        left = remaining - rate * dt
        remaining = 0.0 if left < 0.0 else left
    else:
        attained, run_s, busy, remaining = whole_gang_steps(
            dts, n, n, rate, attained, run_s, busy, remaining)
    _set_books(j, fl, attained, remaining, run_s, busy, end)


def _steps_as_arrays(group: Sequence[SimJob], dts: Sequence[float], end: float) -> None:
    """:func:`_steps_inline` for every job of ``group`` (all from the same last update), the
    jobs' books as arrays: per step, one array operation where each job took one float
    operation, in the same order on the same values (int gang sizes become exact floats), so
    every result is the same bit for bit."""
    count = len(group)
    places = [j.placement for j in group]
    fls = [p.flavor for p in places if p is not None]
    gpus = np.fromiter((p.num_gpus for p in places if p is not None), dtype=float, count=count)
    rate = np.fromiter((j.rate for j in group), dtype=float, count=count)
    attained = np.fromiter((j.attained_gpu_s for j in group), dtype=float, count=count)
    remaining = np.fromiter((j.remaining for j in group), dtype=float, count=count)
    run_s = np.fromiter((j.run_s.get(fl, 0.0) for j, fl in zip(group, fls, strict=True)),
                        dtype=float, count=count)
    busy = np.fromiter((j.busy_gpu_s.get(fl, 0.0) for j, fl in zip(group, fls, strict=True)),
                       dtype=float, count=count)
    held = np.empty(count)
    left = np.empty(count)
    for dt in dts:
        np.multiply(gpus, dt, out=held)
        np.add(attained, held, out=attained)
        np.add(run_s, dt, out=run_s)
        np.add(busy, held, out=busy)
        np.multiply(rate, dt, out=left)
        np.subtract(remaining, left, out=left)
        remaining = np.where(left < 0.0, 0.0, left)
    for j, fl, a, r, s, b in zip(group, fls, attained.tolist(), remaining.tolist(),
                                 run_s.tolist(), busy.tolist(), strict=True):
        _set_books(j, fl, a, r, s, b, end)


def _set_books(j: SimJob, fl: str, attained: float, remaining: float, run_s: float,
               busy: float, end: float) -> None:
    """Store a whole gang's books after its steps and build its view from them."""
    j.attained_gpu_s = attained
    j.remaining = remaining
    run_s_of = j.run_s
    run_s_of[fl] = run_s
    j.busy_gpu_s[fl] = busy
    j.last_update_s = end
    j._view = new_view(
        j.spec, _RUNNING, remaining, j.placement, attained,
        ((fl, run_s),) if len(run_s_of) == 1 else tuple(run_s_of.items()),
        j.pending_since_s, j.last_run_end_s, j.attempts, end, j.rate, j.progress_from_s,
    )


def steps_from(times: Sequence[float], last: float) -> tuple[list[float], float]:
    """The differences ``t - last`` that advancing from ``last`` through ``times`` takes, in
    order (a time not past the previous one is skipped, as :meth:`SimJob.advance` skips it),
    and the time they end at."""
    dts: list[float] = []
    for t in times:
        dt = t - last
        if dt <= 0:
            continue
        dts.append(dt)
        last = t
    return dts, last


def move(job: SimJob, new: JobState) -> None:
    """Change ``job``'s state through the lifecycle table (raises on an illegal change)."""
    job.state = transition(job.state, new)
