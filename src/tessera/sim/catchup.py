"""Catching every running job of a round up through the event times since the last round.

The world notes event times instead of advancing every running job at each
(:meth:`tessera.sim.world.SimWorld.tick`); :func:`catch_up` then settles them when they are
next looked at, with the same books and views bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobState
from tessera.sim.state import SimJob, new_view
from tessera.sim.steps import steps_from, whole_gang_steps

_RUNNING = JobState.RUNNING


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


def _set_books(j: SimJob, fl: GpuFlavor, attained: float, remaining: float, run_s: float,
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
