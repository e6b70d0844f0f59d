"""Each job's carbon by finish slot, a tighter bound from it, and the schedule it prices
(issue 34, 3c).

:mod:`tessera.sim.carbon_bound` bounds the carbon of any cloud-study schedule at an average
wait ``W`` by an LP relaxation. This module computes a bound at least as tight, and much
faster, by **Lagrangian duality** on the same exact problem:

1. *The frontier.* For job ``j`` and each finish slot ``f`` (``a + d ≤ f ≤ e``), the least
   carbon of any plan that does its ``d`` units of work in slots ``[a, f)`` with a power limit
   per slot: a fractional knapsack over the hull's increments (each slot offers the hull steps
   of :func:`~tessera.sim.carbon_slot_limits.hull_steps` at ``c_s × ΔP / Δspeed`` per unit;
   taking the cheapest first is optimal), ``C_j(f)``. Its wait is ``f − a − d`` slots.
2. *The bound.* For any price ``λ ≥ 0`` (grams per slot of one job's wait), every schedule
   with ``Σ_j wait_j ≤ N·W`` has carbon ``Σ_j C_j ≥ Σ_j (C_j + λ·wait_j) − λ·N·W ≥
   Σ_j min_f (C_j(f) + λ·(f − a − d)) − λ·N·W =: L(λ)``. So **every** ``L(λ)`` is a lower
   bound (weak duality; no convexity needed, the exact integral problem is bounded directly);
   ``L`` is concave in ``λ`` (a minimum of lines), and a golden-section search takes its
   maximum. It is at least the LP relaxation's optimum (the Lagrangian dual of an integer
   program is at least its LP relaxation), and ``tests/sim/test_carbon_frontier.py`` checks
   both against every simulated mode.
3. *The schedule.* The same price is a policy: each job takes the finish slot minimising
   ``C_j(f) + λ·wait`` and the plan behind it (full power in clean slots, low limits or off in
   dirty ones). The lowest ``λ`` whose average wait is at most ``W`` is a real schedule; its
   carbon minus the bound is what any policy could still gain. Unlike ours in
   :mod:`tessera.sim.carbon_shift` (``price × GPUs × hours``), the price is per *job*-hour:
   the goal's metric is the average wait over jobs, so an 8-GPU job's hour of waiting is
   worth no more than a 1-GPU job's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerModel
from tessera.sim.carbon_bound import BoundJob, counted_hull
from tessera.sim.carbon_shift import SLOT_S, ShiftJob, _Grid, _slots
from tessera.workload.carbon import CarbonTrace

__all__ = ["Frontier", "FrontierOutcome", "bound_and_schedule", "cluster_bound",
           "dual_bound", "finish_frontier", "frontier_of", "priced_schedule", "study_frontier"]

_TO_KWH = SLOT_S / 3.6e6  # W × slot → kWh


@dataclass(frozen=True, slots=True)
class Frontier:
    """Every job's least carbon (grams) and its energy (J) by wait (slots), padded.

    ``carbon_g[j, w]`` is job ``j``'s least carbon when it may wait ``w`` slots (``inf``
    beyond its slack); ``energy_j`` the energy of that plan.
    """

    carbon_g: np.ndarray
    energy_j: np.ndarray

    def pick(self, price_g_per_slot: float) -> np.ndarray:
        """Each job's wait (slots) minimising ``carbon + price × wait`` (the shortest on
        ties)."""
        waits = np.arange(self.carbon_g.shape[1])
        return np.argmin(self.carbon_g + price_g_per_slot * waits[None, :], axis=1)

    def dual(self, price_g_per_slot: float, total_wait_slots: float) -> float:
        """``L(price)``: a lower bound on the carbon (g) of any schedule whose waits sum to
        at most ``total_wait_slots``."""
        waits = np.arange(self.carbon_g.shape[1])
        inner = np.min(self.carbon_g + price_g_per_slot * waits[None, :], axis=1)
        return float(inner.sum() - price_g_per_slot * total_wait_slots)

    def top_price(self) -> float:
        """A price at and above which every job waits 0 slots."""
        c = self.carbon_g
        saving = np.where(np.isfinite(c), c[:, :1] - c, 0.0)[:, 1:]
        per_slot = saving / np.arange(1, c.shape[1])[None, :]
        return float(max(per_slot.max(initial=0.0), 0.0)) * 1.01 + 1e-9


@dataclass(frozen=True, slots=True)
class FrontierOutcome:
    """Carbon (kg), energy (kWh) and average wait (s) of a bound or a schedule."""

    carbon_kg: float
    energy_kwh: float
    avg_wait_s: float
    price_g_per_slot: float


def finish_frontier(ci: np.ndarray, steps: Sequence[tuple[float, float]], work: int,
                    gpus: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(carbon_g, energy_j)`` of the least-carbon plan of ``work`` full-power slots of
    work in slots ``[0, f)``, for each ``f = work … len(ci)`` (index ``f − work``).

    ``ci`` is the job's window (g/kWh per slot, from its first slot to its last finish);
    ``steps`` the hull's ``(Δspeed, Δpower_w)`` per GPU.
    """
    n, k = len(ci), len(steps)
    if work < 1 or n < work:
        raise SpecError(f"carbon frontier: {work} slots of work do not fit in {n} slots")
    d_speed = np.array([s for s, _ in steps])
    unit = np.array([p for _, p in steps]) / d_speed  # W per unit of work, rising
    slot = np.repeat(np.arange(n), k)
    amount = np.tile(d_speed, n)
    cost = (ci[:, None] * unit[None, :]).ravel()
    order = np.argsort(cost, kind="stable")
    slot, amount, cost, per_unit = slot[order], amount[order], cost[order], unit[
        np.tile(np.arange(k), n)[order]]
    finishes = np.arange(work, n + 1)
    a = np.where(slot[None, :] < finishes[:, None], amount[None, :], 0.0)
    before = np.cumsum(a, axis=1) - a
    taken = np.clip(work - before, 0.0, a)  # the cheapest increments until the work is done
    scale = gpus * _TO_KWH
    return (taken @ cost) * scale, (taken @ per_unit) * gpus * SLOT_S


def frontier_of(ci: np.ndarray, jobs: Sequence[BoundJob],
                steps: Sequence[tuple[float, float]]) -> Frontier:
    """The :class:`Frontier` of ``jobs`` under intensities ``ci`` (one per slot)."""
    if not jobs:
        raise SpecError("carbon frontier: no jobs")
    width = max(j.end - j.first - j.work for j in jobs) + 1
    carbon = np.full((len(jobs), width), np.inf)
    energy = np.zeros((len(jobs), width))
    for i, j in enumerate(jobs):
        if j.end > len(ci):
            raise SpecError(f"carbon frontier: job {i} ends after the trace ({len(ci)} slots)")
        c, e = finish_frontier(ci[j.first:j.end], steps, j.work, j.gpus)
        carbon[i, :len(c)], energy[i, :len(e)] = c, e
    return Frontier(carbon, energy)


def dual_bound(front: Frontier, avg_wait_slots: float, iterations: int = 100) -> float:
    """``max_λ L(λ)`` by golden-section search on ``[0, top_price]`` (grams; the best of the
    evaluated ``L``, each a valid bound)."""
    if not (avg_wait_slots >= 0 and math.isfinite(avg_wait_slots)):
        raise SpecError(f"carbon bound: average wait must be >= 0, got {avg_wait_slots}")
    total = avg_wait_slots * front.carbon_g.shape[0]
    lo, hi = 0.0, front.top_price()
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = front.dual(x1, total), front.dual(x2, total)
    best = max(f1, f2, front.dual(lo, total), front.dual(hi, total))
    for _ in range(iterations):
        if f1 < f2:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = front.dual(x2, total)
        else:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = front.dual(x1, total)
        best = max(best, f1, f2)
    return best


def priced_schedule(front: Frontier, avg_wait_slots: float,
                    iterations: int = 80) -> tuple[float, float, float, float]:
    """The schedule at the lowest price whose average wait is at most ``avg_wait_slots``:
    ``(carbon_g, energy_j, avg_wait_slots, price)`` (bisection on ``[0, top_price]``)."""
    rows = np.arange(front.carbon_g.shape[0])

    def at(price: float) -> tuple[float, float, float, float]:
        w = front.pick(price)
        return (float(front.carbon_g[rows, w].sum()), float(front.energy_j[rows, w].sum()),
                float(w.mean()), price)

    free = at(0.0)
    if free[2] <= avg_wait_slots + 1e-12:
        return free
    lo, hi = 0.0, front.top_price()
    best = at(hi)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        r = at(mid)
        if r[2] <= avg_wait_slots + 1e-12:
            best, hi = r, mid
        else:
            lo = mid
    return best


def study_frontier(jobs: Sequence[ShiftJob], trace: CarbonTrace, flavor: GpuFlavor,
                   model: PowerModel | None = None, count: str = "gaia") -> Frontier:
    """The :class:`Frontier` of cloud-study jobs (``count`` as in
    :func:`~tessera.sim.carbon_bound.carbon_lower_bound`)."""
    steps = counted_hull(len(jobs), flavor, model, count, "carbon frontier")
    slots = [_slots(j) for j in jobs]
    grid = _Grid(trace, max(e for _, _, e in slots) + 1)
    return frontier_of(grid.ci, [BoundJob(a, d, e, j.gpus)
                                 for (a, d, e), j in zip(slots, jobs, strict=True)], steps)


def bound_and_schedule(front: Frontier, avg_wait_s: float
                       ) -> tuple[FrontierOutcome, FrontierOutcome]:
    """The Lagrangian bound and the priced schedule at an average wait of ``avg_wait_s``."""
    w = avg_wait_s / SLOT_S
    lb = dual_bound(front, w)
    c, e, wait, price = priced_schedule(front, w)
    return (FrontierOutcome(lb / 1e3, math.nan, avg_wait_s, math.nan),
            FrontierOutcome(c / 1e3, e / 3.6e6, wait * SLOT_S, price))


def cluster_bound(jobs: Sequence[tuple[float, float, int, float]], trace: CarbonTrace,
                  flavor: GpuFlavor, avg_wait_s: float, model: PowerModel | None = None,
                  count: str = "above-idle",
                  latest_finish_s: Sequence[float] | None = None) -> float:
    """A lower bound (kg) on the carbon of the cluster simulator's jobs at an average wait
    of at most ``avg_wait_s``, for schedules in which every job keeps its slack -- or, with
    ``latest_finish_s`` (one per job), finishes by the later of its slack and that time
    (pass the finishes of the schedules compared, so that jobs that lost their slack for
    lack of GPUs are covered too).

    ``jobs`` are ``(submit_s, length_s, gpus, slack_s)`` (length at full power, a whole number
    of slots). Capacity is ignored (a relaxation), and so are suspension costs (they only add
    carbon). Job ``j`` arriving at ``t = a·SLOT + δ`` may use slot ``a`` whole (a relaxation)
    and finishes by ``t + length + slack``, in slot ``e − 1`` at the latest. In the
    simulator its wait is ``W_j = C_j − t − length``; its finish slot ``F_j = ⌈C_j / SLOT⌉``
    is below ``C_j / SLOT + 1``, so its slot wait ``F_j − a − d < W_j / SLOT + δ / SLOT + 1``:
    the bound allows that much (about 1.5 slots a job more than the simulator's wait), which
    keeps it valid and makes it looser. ``count``: ``"above-idle"`` (the cluster table's
    "(jobs)" column) or ``"gaia"`` (each job's full draw).
    """
    steps = counted_hull(len(jobs), flavor, model, count, "carbon bound")
    if latest_finish_s is not None and len(latest_finish_s) != len(jobs):
        raise SpecError(f"carbon bound: {len(latest_finish_s)} finishes for {len(jobs)} jobs")
    bjobs, budget = [], 0.0
    for i, (submit_s, length_s, gpus, slack_s) in enumerate(jobs):
        d = round(length_s / SLOT_S)
        if d < 1 or abs(d * SLOT_S - length_s) > 1e-6:
            raise SpecError(f"carbon bound: job length {length_s:g} s is not a whole number "
                            f"of {SLOT_S:g} s slots")
        a = int(submit_s // SLOT_S)
        last_s = submit_s + length_s + slack_s
        if latest_finish_s is not None:
            last_s = max(last_s, latest_finish_s[i])
        e = max(a + d, math.ceil(last_s / SLOT_S - 1e-9))
        bjobs.append(BoundJob(a, d, e, gpus))
        budget += avg_wait_s / SLOT_S + (submit_s - a * SLOT_S) / SLOT_S + 1
    grid = _Grid(trace, max(j.end for j in bjobs) + 1)
    front = frontier_of(grid.ci, bjobs, steps)
    return dual_bound(front, budget / len(bjobs)) / 1e3
