"""Carbon-aware shifting of jobs that declare slack, against GAIA's baselines (issue 34, 3c).

A job with slack (``JobSpec.max_delay_s``, or a deadline) may finish up to that much later
than if it ran at once; a carbon-aware scheduler spends the slack to run in cleaner hours. This
module compares four ways to spend it, in GAIA's setting (Hanafy et al., ASPLOS'24): a cloud
where every job gets its GPUs when it asks (no queueing for capacity), time in slots of
:data:`SLOT_S` (30 min, the carbon traces' step), carbon known ahead (GAIA's oracle forecast,
given to every policy alike), and a job's length known.

* ``agnostic`` -- runs at once, at full power.
* ``carbon-time`` -- GAIA's *Carbon-Time* (its "carbon saving per waiting time"): of the start
  times within the slack, the one that maximises ``(C(now) − C(start)) / (wait + length)``,
  then runs without a break at full power.
* ``wait-awhile`` -- *Let's Wait Awhile* (Wiesner et al., Middleware'21) as GAIA runs it:
  suspend/resume, the job runs in the ``length`` cleanest slots before its deadline
  (``submit + length + slack``), at full power.
* ``carbon-price`` (ours) -- suspend/resume *and* a GPU power limit per job (the power model's
  limits, :func:`tessera.perf.power_estimate.default_power_model`): for each possible finish
  slot and each limit, the cleanest slots that fit the work at that limit; it picks the plan
  minimising ``carbon + price × GPU-hours of delay``. The *price* (grams of CO2 per GPU-hour
  of waiting) is one number for the whole workload, so waiting goes to the jobs whose carbon
  falls most per hour waited; :func:`match_wait` sets it so that the average waiting time
  equals a baseline's. With ``slot_limits`` the limit is chosen per slot instead of per job
  (:mod:`tessera.sim.carbon_slot_limits`: full power in clean slots, low limits or off in
  dirty ones), which minimises carbon rather than energy.

Waiting time is the delay of the job's completion against running at once at full power
(``finish − submit − length``), so suspending counts as waiting. Carbon counts each job's GPUs
at its power while it runs (idle and suspended GPUs are released to the cloud and not
counted, as in GAIA).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerModel
from tessera.perf.power_estimate import default_power_model
from tessera.sim.carbon_slot_limits import hull_steps, plan_per_slot
from tessera.workload.carbon import CarbonTrace

R = TypeVar("R")

__all__ = [
    "POLICIES", "SLOT_S", "ShiftJob", "ShiftResult", "match_wait", "run_shift",
]

SLOT_S = 1800.0
"""Length of one time slot, in seconds (the carbon traces' step)."""


@dataclass(frozen=True, slots=True)
class ShiftJob:
    """A job of the shifting study.

    Attributes:
        job_id: its name (for errors).
        submit_s: submission, seconds from the trace's start.
        length_s: run time at full power.
        gpus: GPUs it holds while it runs.
        max_delay_s: its slack, seconds (``None`` with ``deadline_s``: computed from it).
        deadline_s: the latest completion it accepts (``None``: ``max_delay_s`` says).
    """

    job_id: str
    submit_s: float
    length_s: float
    gpus: int = 1
    max_delay_s: float | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.submit_s) and self.submit_s >= 0):
            raise SpecError(f"job {self.job_id}: submit_s must be >= 0, got {self.submit_s}")
        if not (math.isfinite(self.length_s) and self.length_s > 0):
            raise SpecError(f"job {self.job_id}: length_s must be > 0, got {self.length_s}")
        if self.gpus < 1:
            raise SpecError(f"job {self.job_id}: gpus must be >= 1, got {self.gpus}")
        if self.deadline_s is not None:
            earliest = self.submit_s + self.length_s
            if not math.isfinite(self.deadline_s) or self.deadline_s < earliest:
                raise SpecError(
                    f"job {self.job_id}: deadline {self.deadline_s:g} s is in the past: before "
                    f"submission + length = {earliest:g} s")
        elif self.max_delay_s is not None and not 0 <= self.max_delay_s < math.inf:
            raise SpecError(f"job {self.job_id}: max_delay_s must be >= 0, got "
                            f"{self.max_delay_s!r}")

    @property
    def slack_s(self) -> float:
        """How much later than at once it may finish (0 without slack)."""
        if self.deadline_s is not None:
            return self.deadline_s - self.submit_s - self.length_s
        return self.max_delay_s or 0.0


@dataclass(frozen=True, slots=True)
class ShiftResult:
    """One policy's outcome on a workload."""

    policy: str
    carbon_kg: float
    energy_kwh: float
    avg_wait_s: float
    price_g_per_gpu_h: float | None = None


@dataclass(frozen=True, slots=True)
class _Level:
    """A power limit: per-GPU draw (W) and work per slot (1 at full power)."""

    power_w: float
    speed: float


@dataclass(frozen=True, slots=True)
class _Plan:
    carbon_g: float
    energy_j: float
    finish_slot: int


class _Grid:
    """The trace's intensity per slot, with prefix sums for windows of consecutive slots."""

    def __init__(self, trace: CarbonTrace, slots: int) -> None:
        edges = np.arange(slots + 1) * SLOT_S
        self.ci = np.diff(trace.integral(edges)) / SLOT_S  # g/kWh, the slot's mean
        self.cum = np.concatenate(([0.0], np.cumsum(self.ci)))

    def window(self, start: int, n: int) -> float:
        return float(self.cum[start + n] - self.cum[start])


def _levels(model: PowerModel, flavor: GpuFlavor, with_limits: bool) -> list[_Level]:
    top = model.estimate("", None, flavor)
    out = [_Level(top.avg_power_w, 1.0)]
    if with_limits:
        for w in model.limit_range(flavor).limits_w()[:-1]:
            e = model.estimate("", None, flavor, power_limit_w=w)
            out.append(_Level(e.avg_power_w, 1.0 / e.step_time_factor))
    return out


def _slots(job: ShiftJob) -> tuple[int, int, int]:
    """``(first slot, length in slots, last slot to finish by)`` of ``job``."""
    a = int(job.submit_s // SLOT_S)
    d = max(1, math.ceil(job.length_s / SLOT_S - 1e-9))
    return a, d, a + d + int(job.slack_s // SLOT_S)


def _g(ci_sum: float, level: _Level, gpus: int) -> float:
    """Grams of CO2 of ``gpus`` at ``level`` over slots whose intensities sum to ``ci_sum``."""
    return ci_sum * level.power_w * gpus * SLOT_S / 3.6e6


def _plan_agnostic(job: ShiftJob, grid: _Grid, full: _Level) -> _Plan:
    a, d, _ = _slots(job)
    return _Plan(_g(grid.window(a, d), full, job.gpus), full.power_w * job.gpus * d * SLOT_S,
                 a + d)


def _plan_carbon_time(job: ShiftJob, grid: _Grid, full: _Level) -> _Plan:
    a, d, last = _slots(job)
    now = grid.window(a, d)
    best, best_i = 0.0, 0
    for i in range(0, last - d - a + 1):
        score = (now - grid.window(a + i, d)) / (i + d)
        if score > best:
            best, best_i = score, i
    s = a + best_i
    return _Plan(_g(grid.window(s, d), full, job.gpus), full.power_w * job.gpus * d * SLOT_S,
                 s + d)


def _plan_cleanest(job: ShiftJob, grid: _Grid, levels: Sequence[_Level],
                   price_g_per_gpu_h: float) -> _Plan:
    """The cheapest ``carbon + price × delay`` plan over finish slots and power levels
    (``wait-awhile``: full power only and the latest finish, price 0)."""
    a, d, last = _slots(job)
    best: _Plan | None = None
    best_cost = math.inf
    ci = grid.ci
    for lv in levels:
        need = d / lv.speed  # slots of work at this level
        n = math.ceil(need - 1e-9)
        if a + n > last:
            continue
        # The n cleanest slots of [a, f) as f grows: a max-heap (negated) of the n kept.
        heap = [-float(x) for x in ci[a:a + n]]
        heapq.heapify(heap)
        total = -sum(heap)
        for f in range(a + n, last + 1):
            if f > a + n:
                v = float(ci[f - 1])
                if v < -heap[0]:
                    total += v + heapq.heapreplace(heap, -v)
            # The work fills n − 1 slots and part of one: the dirtiest kept (heap top).
            part = n - need
            carbon = _g(total + part * heap[0], lv, job.gpus)
            delay_h = (f - a - d) * SLOT_S / 3600
            cost = carbon + price_g_per_gpu_h * job.gpus * delay_h
            if cost < best_cost - 1e-12:
                best_cost = cost
                best = _Plan(carbon, lv.power_w * job.gpus * need * SLOT_S, f)
    assert best is not None  # (full power always fits: last >= a + d)
    return best


def _plan_per_slot(job: ShiftJob, grid: _Grid, levels: Sequence[_Level],
                   price_g_per_gpu_h: float) -> _Plan:
    """The cheapest ``carbon + price × delay`` plan with a power limit per slot
    (:func:`~tessera.sim.carbon_slot_limits.plan_per_slot`)."""
    a, d, last = _slots(job)
    steps = hull_steps([(lv.speed, lv.power_w) for lv in levels])
    to_g = job.gpus * SLOT_S / 3.6e6  # (g/kWh × W × slots → grams)
    price_u = price_g_per_gpu_h * job.gpus * SLOT_S / 3600 / to_g
    carbon_u, energy_u, finish = plan_per_slot(grid.ci[a:last], steps, float(d), d, price_u)
    return _Plan(carbon_u * to_g, energy_u * job.gpus * SLOT_S, a + finish)


def _plan_wait_awhile(job: ShiftJob, grid: _Grid, full: _Level) -> _Plan:
    """The ``length`` cleanest slots before the deadline; it finishes at its last one."""
    a, d, last = _slots(job)
    window = grid.ci[a:last]
    pick = np.sort(np.argsort(window, kind="stable")[:d])
    carbon = _g(float(window[pick].sum()), full, job.gpus)
    return _Plan(carbon, full.power_w * job.gpus * d * SLOT_S, a + int(pick[-1]) + 1)


POLICIES: tuple[str, ...] = ("agnostic", "carbon-time", "wait-awhile", "carbon-price")
"""The policies :func:`run_shift` knows."""


def run_shift(
    jobs: Sequence[ShiftJob], trace: CarbonTrace, policy: str, flavor: GpuFlavor,
    price_g_per_gpu_h: float = 0.0, model: PowerModel | None = None,
    power_limits: bool = True, slot_limits: bool = False,
) -> ShiftResult:
    """Carbon, energy and average waiting time of ``policy`` on ``jobs`` under ``trace``.

    ``power_limits=False`` keeps ``carbon-price`` at full power (to see what the limits add);
    ``slot_limits`` gives ``carbon-price`` a limit per slot instead of one per job.

    Raises:
        SpecError: an unknown policy, a negative price, or no jobs.
    """
    if policy not in POLICIES:
        raise SpecError(f"shift policy {policy!r}: one of {', '.join(POLICIES)}")
    if not (price_g_per_gpu_h >= 0 and math.isfinite(price_g_per_gpu_h)):
        raise SpecError(f"carbon price must be >= 0 g per GPU-hour, got {price_g_per_gpu_h}")
    if not jobs:
        raise SpecError("carbon shifting: no jobs")
    m = model or default_power_model()
    levels = _levels(m, flavor, with_limits=policy == "carbon-price" and power_limits)
    horizon = max(_slots(j)[2] for j in jobs) + 1
    grid = _Grid(trace, horizon)
    plan: Callable[[ShiftJob], _Plan] = {
        "agnostic": lambda j: _plan_agnostic(j, grid, levels[0]),
        "carbon-time": lambda j: _plan_carbon_time(j, grid, levels[0]),
        "wait-awhile": lambda j: _plan_wait_awhile(j, grid, levels[0]),
        "carbon-price": (lambda j: _plan_per_slot(j, grid, levels, price_g_per_gpu_h))
        if slot_limits else (lambda j: _plan_cleanest(j, grid, levels, price_g_per_gpu_h)),
    }[policy]
    carbon = energy = wait = 0.0
    for j in jobs:
        p = plan(j)
        a, d, _ = _slots(j)
        carbon += p.carbon_g
        energy += p.energy_j
        wait += (p.finish_slot - a - d) * SLOT_S
    return ShiftResult(policy, carbon / 1e3, energy / 3.6e6, wait / len(jobs),
                       price_g_per_gpu_h if policy == "carbon-price" else None)


def match_wait(
    jobs: Sequence[ShiftJob], trace: CarbonTrace, flavor: GpuFlavor, target_wait_s: float,
    model: PowerModel | None = None, iterations: int = 14, power_limits: bool = True,
    slot_limits: bool = False,
) -> ShiftResult:
    """``carbon-price`` with the lowest price whose average wait is at most ``target_wait_s``
    (bisection on a log scale between 0.01 and 10^4 g per GPU-hour; price 0 when even that
    waits no longer)."""
    def run(price: float) -> ShiftResult:
        return run_shift(jobs, trace, "carbon-price", flavor, price, model, power_limits,
                         slot_limits)

    return lowest_price_within(run, lambda r: r.avg_wait_s <= target_wait_s, iterations)


def lowest_price_within(run: Callable[[float], R], ok: Callable[[R], bool],
                        iterations: int = 14) -> R:
    """The outcome of ``run(price)`` at the lowest carbon price (g per GPU-hour) for which
    ``ok`` holds (a wait budget met): price 0 when it already holds, else a bisection on a log
    scale between 0.01 and 10^4 (a higher price waits less), ending on the best price that
    holds (10^4 when none in between does)."""
    free = run(0.0)
    if ok(free):
        return free
    lo, hi = math.log(0.01), math.log(1e4)
    best = run(1e4)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        r = run(math.exp(mid))
        if ok(r):
            best, hi = r, mid
        else:
            lo = mid
    return best
