"""Carbon-aware shifting inside a finite cluster: which slack jobs may run in this slot.

Jobs that declare slack (``JobSpec.max_delay_s``) may finish up to that much later than if
they ran at once; this stage spends the slack on cleaner hours. It runs *before* the base
policy: each round it decides, for every active slack job, whether it may run in the current
slot of the carbon forecast; the jobs it holds are taken out of the snapshot (a running one
is suspended -- checkpointed, its GPUs given back), the base policy decides over the rest as
usual, and the held jobs wait with reason ``carbon``. So every mode only chooses *when* a job
may start or run: if no GPUs are free when it may, it waits for capacity like any job.

The stage is pure: it reads the snapshot, the oracle's rates and the forecast
(:class:`CarbonForecast`, an input -- GAIA's oracle forecast, the same for every mode); it
reads no clock. Time is cut into slots of ``forecast.slot_s`` (30 min, the traces' step).

A job's *length* is its work at the fastest flavor's rate (``total_steps / best_rate``), its
*latest finish* ``submit + length + slack``. Every mode obeys one safety rule: a job that
could not finish by its latest finish if held until the next slot boundary (its remaining
run time -- at its power limit's speed under per-job Zeus, ``PlacementOptions.zeus`` -- plus
one suspension's ``overhead_s``) is never held -- so shifting never makes a job
miss its slack (only a lack of GPUs can).

Modes (``CarbonShift.mode``):

* ``carbon-time`` -- GAIA's Carbon-Time: at submission it picks the start slot within the
  slack that maximises ``(C(now) − C(start)) / (wait + length)`` (``C``: the forecast's
  intensity summed over the job's length) and is held until then; once started it is never
  suspended.
* ``wait-awhile`` -- Let's Wait Awhile as GAIA runs it: suspend/resume; the job may run in a
  slot only if the slot is among the ``k`` cleanest of the slots left before its latest
  finish (``k``: its remaining run time in slots), recomputed every slot, so a slot lost to
  a lack of GPUs is made up later.
* ``ours`` -- capacity-aware filling with a carbon price: the slack jobs are planned together,
  earliest latest-finish first, into a per-slot GPU budget (the cluster's GPUs less what jobs
  without slack hold now, for as long as they run); each takes the plan (finish slot and its
  cleanest slots with GPUs left) minimising ``carbon + price × GPU-hours of delay``, and the
  slots it takes are booked (running jobs are planned first, so none is suspended only to
  reorder). A job is held only if the current slot had room for it and its plan does not use
  it; one with no room now is left to the base policy (it waits for capacity, or is
  backfilled where the plan's GPU count was too coarse, e.g. fragmented servers). Price 0 is
  "cleanest slots that still have room"; a high price runs jobs at once. The price (grams of
  CO2 per GPU-hour of waiting) is one number for the workload; a benchmark bisects it to
  match a baseline's average wait.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

import numpy as np

from tessera.model.jobs import JobId, JobState
from tessera.sched.core.carbon_options import SHIFT_MODES, CarbonForecast, CarbonShift
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.policy import Policy
from tessera.sched.core.power_options import ZeusCost
from tessera.sched.core.reasons import CarbonHeld, PendingKind, PendingReason
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sched.core.strategies import PlacementOptions

__all__ = [
    "SHIFT_MODES", "CarbonForecast", "CarbonShift", "Holds", "carbon_holds", "decide_shifted",
]

@dataclass(frozen=True, slots=True)
class _Slack:
    """What the stage knows of one active slack job now."""

    view: JobView
    length_s: float
    remaining_s: float
    latest_s: float
    must_run: bool
    tight: bool
    """It cannot finish by its latest finish at its power limit's speed even if run now."""


def _slack_jobs(snapshot: Snapshot, shift: CarbonShift, ctx: DecisionContext,
                zeus: ZeusCost | None) -> list[_Slack]:
    """The active slack jobs. Their remaining run time is at the speed they will run: under
    per-job Zeus (``zeus``) at their limit's step-time factor on their fastest flavor."""
    now, slot = snapshot.now_s, shift.forecast.slot_s
    boundary = (shift.forecast.slot_of(now) + 1) * slot
    out = []
    for v in snapshot.jobs:
        slack = v.spec.max_delay_s
        if not slack:
            continue
        rate = ctx.oracle.best_rate(v.spec)
        if rate <= 0:
            continue
        slow = 1.0
        if zeus is not None:
            flavor = ctx.oracle.fastest_first(v.spec)[0]
            limit_w = zeus.best(v.spec, flavor)[0]
            slow = zeus.model.estimate(v.spec.job_type, v.spec.model, flavor,
                                       limit_w).step_time_factor
        length = v.spec.total_steps / rate
        remaining = v.remaining_at(now) / rate * slow
        latest = v.spec.submit_time_s + length + slack
        must = boundary + remaining + shift.overhead_s > latest
        resume_s = 0.0 if v.state is JobState.RUNNING else shift.overhead_s
        tight = slow > 1.0 and now + remaining + resume_s > latest
        out.append(_Slack(v, length, remaining, latest, must, tight))
    return out


def _carbon_time_start(shift: CarbonShift, job: _Slack) -> int:
    """GAIA's Carbon-Time: the start slot maximising carbon saved per second of waiting."""
    f = shift.forecast
    a = f.slot_of(job.view.spec.submit_time_s)
    d = max(1, math.ceil(job.length_s / f.slot_s - 1e-9))
    shifts = int((job.view.spec.max_delay_s or 0.0) // f.slot_s)
    ci = f.window(a, shifts + d)
    cum = np.concatenate(([0.0], np.cumsum(ci)))
    now = cum[d] - cum[0]
    best, best_i = 0.0, 0
    for i in range(1, shifts + 1):
        score = (now - (cum[i + d] - cum[i])) / (i + d)
        if score > best + 1e-12:
            best, best_i = score, i
    return a + best_i


def _wait_awhile(shift: CarbonShift, job: _Slack, now_s: float) -> bool:
    """May ``job`` run in the current slot: is it among the ``k`` cleanest left?"""
    f = shift.forecast
    n = f.slot_of(now_s)
    k = _slots_needed(f, job)
    window = max(k, int(job.latest_s // f.slot_s) - n)
    ci = f.window(n, window)
    cleanest = np.argsort(ci, kind="stable")[:k]
    return bool((cleanest == 0).any())


def _ours(snapshot: Snapshot, shift: CarbonShift,
          jobs: list[_Slack]) -> tuple[set[JobId], set[JobId]]:
    """The slack jobs whose capacity-aware plan uses the current slot, and the waiting ones
    the plan found no room for now (module docstring)."""
    f = shift.forecast
    now = snapshot.now_s
    n = f.slot_of(now)
    horizon = 1 + max((max(_slots_needed(f, j), int(j.latest_s // f.slot_s) - n)
                       for j in jobs), default=1)
    cap = [float(snapshot.cluster.total_gpus)] * horizon
    slack_ids = {j.view.spec.job_id for j in jobs}
    for v in snapshot.jobs:  # jobs without slack keep (or take) their GPUs while they run
        if v.spec.job_id in slack_ids:
            continue
        rate = v.progress_rate
        left_s = v.remaining_at(now) / rate if rate > 0 else f.slot_s
        for i in range(min(horizon, max(1, math.ceil((now + left_s) / f.slot_s) - n))):
            cap[i] -= v.spec.num_gpus
    g_slot = (f.window(n, horizon) * (shift.gpu_power_w / 1e3 * f.slot_s / 3600)).tolist()
    run_now: set[JobId] = set()
    no_room: set[JobId] = set()
    # Running jobs first (they hold their GPUs: no suspension just to reorder), then the
    # waiting ones, earliest latest finish first.
    order = sorted(jobs, key=lambda j: (j.view.state is not JobState.RUNNING, j.latest_s,
                                        j.view.spec.job_id))
    for j in order:
        gpus = j.view.spec.num_gpus
        room_now = cap[0] >= gpus
        pick = _plan(j, f, n, cap, g_slot, shift.price_g_per_gpu_h)
        if pick is not None:
            for i in pick:
                cap[i] -= gpus
        if pick is None or pick[0] == 0 or (j.view.state is JobState.RUNNING and not room_now):
            run_now.add(j.view.spec.job_id)
        elif not room_now:
            no_room.add(j.view.spec.job_id)
    return run_now, no_room


def _slots_needed(f: CarbonForecast, job: _Slack) -> int:
    """Slots of work ``job`` has left (a started slot counts whole)."""
    return max(1, math.ceil(job.remaining_s / f.slot_s - 1e-9))


def _plan(job: _Slack, f: CarbonForecast, n: int, cap: list[float], g_slot: list[float],
          price: float) -> list[int] | None:
    """``job``'s cheapest plan: the slots (offsets from now, ascending) minimising carbon +
    ``price`` × GPU-hours of delay, among slots with room before its latest finish; ``None``
    when too few have room. Finish candidates are walked in time order, keeping the ``k``
    cleanest slots so far in a max-heap."""
    gpus = job.view.spec.num_gpus
    k = _slots_needed(f, job)
    last = max(k, int(job.latest_s // f.slot_s) - n)
    unshifted_end_s = job.view.spec.submit_time_s + job.length_s
    heap: list[tuple[float, int]] = []  # (−grams, slot) of the k cleanest kept
    total, best_cost, best_fin = 0.0, math.inf, -1
    for i in range(last):
        if cap[i] < gpus:
            continue
        delay_h = max(0.0, (n + i + 1) * f.slot_s - unshifted_end_s) / 3600
        if price * gpus * delay_h >= best_cost:  # later finishes only cost more delay
            break
        if len(heap) < k:
            heapq.heappush(heap, (-g_slot[i], i))
            total += g_slot[i]
        elif g_slot[i] < -heap[0][0]:
            total += g_slot[i] + heapq.heapreplace(heap, (-g_slot[i], i))[0]
        if len(heap) == k:
            cost = gpus * (total + price * delay_h)
            if cost < best_cost - 1e-9:
                best_cost, best_fin = cost, i + 1
    if best_fin < 0:
        return None
    room = [i for i in range(best_fin) if cap[i] >= gpus]
    return sorted(sorted(room, key=lambda i: (g_slot[i], i))[:k])


@dataclass(frozen=True, slots=True)
class Holds:
    """What the stage decided for the current slot.

    Attributes:
        carbon: the jobs held out of it (running ones to be suspended), with their reason.
        no_room: ``ours``: waiting jobs its plan has no room for now; they may only fill
            GPUs left free.
        uncapped: jobs that must run at full power to make their latest finish (under
            per-job Zeus their limit would make them miss it).
    """

    carbon: dict[JobId, PendingReason]
    no_room: set[JobId]
    uncapped: set[JobId]


def carbon_holds(snapshot: Snapshot, shift: CarbonShift, ctx: DecisionContext,
                 zeus: ZeusCost | None = None) -> Holds:
    """What ``shift`` decides for the active slack jobs in the current slot (:class:`Holds`)."""
    jobs = _slack_jobs(snapshot, shift, ctx, zeus)
    now = snapshot.now_s
    f = shift.forecast
    no_room: set[JobId] = set()
    if shift.mode == "ours":
        runs, no_room = _ours(snapshot, shift, jobs)
        held = [j for j in jobs if j.view.spec.job_id not in runs | no_room]
    elif shift.mode == "wait-awhile":
        held = [j for j in jobs if not _wait_awhile(shift, j, now)]
    else:  # carbon-time: only jobs that never started, before their start slot
        held = [j for j in jobs if j.view.state is not JobState.RUNNING
                and j.view.last_run_end_s is None and j.view.attained_gpu_s == 0
                and f.slot_of(now) < _carbon_time_start(shift, j)]
    ci_now = float(f.window(f.slot_of(now), 1)[0])
    reason = PendingReason(PendingKind.CARBON, CarbonHeld(shift.mode, ci_now))
    must = {j.view.spec.job_id for j in jobs if j.must_run}
    return Holds({j.view.spec.job_id: reason for j in held if not j.must_run}, no_room - must,
                 {j.view.spec.job_id for j in jobs if j.tight})


def decide_shifted(
    snapshot: Snapshot, policy: Policy, ctx: DecisionContext,
    options: PlacementOptions | None, shift: CarbonShift,
) -> Decision:
    """One round with carbon shifting: the held jobs leave the snapshot (the running ones are
    suspended, their GPUs freed for the others) and ``decide`` runs over the rest; then the
    jobs ``ours`` found no room for may fill what GPUs are still free (a fill-only round, so
    they never displace a planned job), and a job that per-job Zeus's limit would make miss
    its latest finish runs at full power. The round asks to be woken at the next slot boundary
    while any slack job is active."""
    h = carbon_holds(snapshot, shift, ctx, options.zeus if options is not None else None)
    holds, no_room = h.carbon, h.no_room
    boundary = (shift.forecast.slot_of(snapshot.now_s) + 1) * shift.forecast.slot_s
    out = set(holds) | no_room
    if not out:
        d = decide(snapshot, policy, ctx, options)
    else:
        free = None if snapshot.free_gpus is None else dict(snapshot.free_gpus)
        suspended: list[JobId] = []
        for j in snapshot.jobs:
            if j.spec.job_id in holds and j.state is JobState.RUNNING:
                suspended.append(j.spec.job_id)
                _give(free, j.placement, +1)
        keep = tuple(j for j in snapshot.jobs if j.spec.job_id not in out)
        d = decide(replace(snapshot, jobs=keep, free_gpus=free, split_hint=None), policy, ctx,
                   options)
        if no_room and sum(p.num_gpus for p in d.placements.values()) < \
                snapshot.cluster.total_gpus:
            d = _fill(snapshot, d, keep, free, no_room, policy, ctx, options)
        d = replace(d, preempted=(*d.preempted, *suspended), pending={**d.pending, **holds})
    if h.uncapped and d.power_limits_w:
        d = replace(d, power_limits_w={k: w for k, w in d.power_limits_w.items()
                                       if k not in h.uncapped})
    if any(v.spec.max_delay_s for v in snapshot.jobs):
        wake = boundary if d.wakeup_s is None else min(d.wakeup_s, boundary)
        d = replace(d, wakeup_s=wake)
    return d


def _give(free: dict[str, int] | None, p: Placement | None, sign: int) -> None:
    """Add (``sign`` +1) or take (−1) ``p``'s GPUs to the per-node free counts."""
    if free is not None and p is not None:
        for node, k in p.gpus_by_node:
            free[node] = free.get(node, 0) + sign * k


def _fill(snapshot: Snapshot, d: Decision, keep: tuple[JobView, ...],
          free: dict[str, int] | None, no_room: set[JobId], policy: Policy,
          ctx: DecisionContext, options: PlacementOptions | None) -> Decision:
    """A fill-only round after ``d``: its placements hold, and the ``no_room`` jobs may take
    the GPUs still free."""
    started, preempted = set(d.started), set(d.preempted)
    views: list[JobView] = []
    for v in keep:
        jid = v.spec.job_id
        if jid in started:
            views.append(replace(v, state=JobState.RUNNING, placement=d.placements[jid]))
            _give(free, d.placements[jid], -1)
        elif jid in preempted:
            views.append(replace(v, state=JobState.PENDING, placement=None))
            _give(free, v.placement, +1)
        else:
            views.append(v)
    views += [v for v in snapshot.jobs if v.spec.job_id in no_room]
    order = {v.spec.job_id: i for i, v in enumerate(snapshot.jobs)}
    views.sort(key=lambda v: order[v.spec.job_id])
    opts = replace(options or PlacementOptions(), fill_only=True)
    d2 = decide(replace(snapshot, jobs=tuple(views), free_gpus=free, split_hint=None,
                        policy_state=d.policy_state), policy, ctx, opts)
    return replace(d2, started=(*d.started, *d2.started), preempted=d.preempted,
                   wakeup_s=d.wakeup_s if d2.wakeup_s is None or d.wakeup_s is None
                   else min(d.wakeup_s, d2.wakeup_s))
