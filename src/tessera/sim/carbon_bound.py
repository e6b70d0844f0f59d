"""A lower bound on the carbon of any schedule at a given average wait (issue 34, 3c).

The goal "≥ 15 % less carbon than Carbon-Time at the same average wait" is only reachable if
*some* schedule reaches it. This module computes a lower bound on the carbon every schedule
of the cloud study (:mod:`tessera.sim.carbon_shift`: GAIA's uncapacitated setting, 30-minute
slots, the oracle forecast, the power model's limits) emits at an average wait of at most
``W``, as one linear program solved by HiGHS (:func:`scipy.optimize.linprog`).

**The exact problem** (a mixed-integer program). Job ``j`` arrives in slot ``a``, needs ``d``
units of work (slots at full power, so it cannot finish before slot ``a + d``) and must finish
by slot ``e`` (its slack). In each slot ``s`` of ``[a, e)`` it does work ``w_s ∈ [0, 1]`` at
some power limit; the draw of doing ``w`` in a slot is at least ``h(w)``, the lower convex
hull of the points ``(speed, power)`` of the limits and ``(0, 0)`` (off): a point above the
hull is beaten by running part of the slot at each hull neighbour
(:func:`~tessera.sim.carbon_slot_limits.hull_steps`). We write ``w_s = Σ_k x_sk`` with
``0 ≤ x_sk ≤ Δspeed_k`` per hull step ``k``, whose draw per unit of work ``u_k`` rises with
``k``. A binary ``z_s`` says "the job has not finished before slot ``s``"
(``z_s ≥ z_{s+1}``, ``z_s = 1`` for ``s < a + d``); work needs it: ``x_sk ≤ Δspeed_k · z_s``.
The job's wait is then ``finish − a − d = Σ_{s ≥ a+d} z_s`` slots. Minimise
``Σ c_s · u_k · x_sk · gpus`` (grams, through the slot's intensity ``c_s``) such that each
job's work sums to ``d`` and ``Σ_j wait_j ≤ N · W``.

**The relaxation** lets ``z_s ∈ [0, 1]``. Every schedule of the study -- agnostic,
Carbon-Time, Wait-Awhile and ours with one limit per job or per slot -- is a feasible point
of the exact problem with the same carbon and wait (set ``z_s = 1`` up to its last used slot,
and its work per slot is on or above the hull), so its carbon is at least the exact
optimum, which is at least the relaxation's optimum: a valid **lower bound**. (The linking
``x_sk ≤ Δspeed_k · z_s`` per step, rather than ``w_s ≤ z_s``, is the perspective of the
hull: the tightest linear form of "no work after the finish".) The relaxation is not tight:
it may finish a job "half at slot f and half at f + 1", so at a wait between two integral
finishes it interpolates (one job, one dirty slot at 100 and a clean one at 10 g/kWh: at a
wait of half a slot the bound is the mean of the two schedules' carbon,
``tests/sim/test_carbon_bound.py``). Across many jobs that is the lower convex envelope of the
carbon-vs-wait trade-off, which a price-based policy such as ours also follows.

Counts: ``count="gaia"`` charges each job's GPUs their full draw while it runs (GAIA's count,
the cloud study's); ``count="above-idle"`` only the draw above the GPUs' idle power (the
"(jobs)" column of the cluster study: idle draw is the same whatever the schedule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerModel
from tessera.perf.power_estimate import default_power_model
from tessera.sim.carbon_shift import SLOT_S, ShiftJob, _Grid, _levels, _slots
from tessera.sim.carbon_slot_limits import hull_steps
from tessera.workload.carbon import CarbonTrace

__all__ = ["COUNTS", "BoundJob", "CarbonBound", "bound_lp", "carbon_lower_bound"]

COUNTS: tuple[str, ...] = ("gaia", "above-idle")
"""What :func:`carbon_lower_bound` counts (see the module's docstring)."""


def counted_hull(n_jobs: int, flavor: GpuFlavor, model: PowerModel | None, count: str,
                 what: str) -> list[tuple[float, float]]:
    """The lower convex hull of ``flavor``'s power-limit levels (speed, watts counted) under
    ``count``: ``"gaia"`` counts a job's full draw, ``"above-idle"`` its draw above the GPU's
    idle power. Checks ``count`` and that there are jobs (errors start with ``what``)."""
    if count not in COUNTS:
        raise SpecError(f"carbon bound count {count!r}: one of {', '.join(COUNTS)}")
    if not n_jobs:
        raise SpecError(f"{what}: no jobs")
    m = model or default_power_model()
    idle_w = m.idle_power_w(flavor) if count == "above-idle" else 0.0
    return hull_steps([(lv.speed, lv.power_w - idle_w)
                       for lv in _levels(m, flavor, with_limits=True)])


@dataclass(frozen=True, slots=True)
class BoundJob:
    """A job of the bound in slots: arrives in ``first``, ``work`` full-power slots of work
    (it cannot finish before ``first + work``), finishes by ``end`` (exclusive), ``gpus``."""

    first: int
    work: int
    end: int
    gpus: int = 1


@dataclass(frozen=True, slots=True)
class CarbonBound:
    """The relaxation's optimum.

    Attributes:
        carbon_kg: the lower bound on the carbon of any schedule at ``avg_wait_s``.
        energy_kwh: the energy of the relaxation's optimal plan (not itself a bound).
        avg_wait_s: the wait budget the bound holds for.
    """

    carbon_kg: float
    energy_kwh: float
    avg_wait_s: float


def bound_lp(ci: np.ndarray, jobs: Sequence[BoundJob], steps: Sequence[tuple[float, float]],
             avg_wait_slots: float) -> tuple[float, float]:
    """The relaxation's optimum for ``jobs`` under intensities ``ci`` (one per slot).

    Args:
        ci: intensity of every slot (g/kWh); must cover each job's ``end``.
        jobs: the jobs, in slots.
        steps: the hull's ``(Δspeed, Δpower_w)`` steps (:func:`hull_steps`), per GPU.
        avg_wait_slots: the average wait allowed, in slots.

    Returns:
        ``(carbon_g, energy_j)`` of the optimal fractional plan.

    Raises:
        SpecError: a job that cannot fit its work (``work > end − first``), a negative wait,
            or an LP that HiGHS does not solve.
    """
    if not (avg_wait_slots >= 0 and math.isfinite(avg_wait_slots)):
        raise SpecError(f"carbon bound: average wait must be >= 0, got {avg_wait_slots}")
    if not jobs:
        raise SpecError("carbon bound: no jobs")
    d_speed = np.array([s for s, _ in steps])
    d_power = np.array([p for _, p in steps])
    k = len(steps)
    to_g = SLOT_S / 3.6e6  # (g/kWh × W × slots → grams)
    cost: list[np.ndarray] = []
    energy: list[np.ndarray] = []
    upper: list[np.ndarray] = []
    eq_cols: list[np.ndarray] = []
    ub_rows: list[np.ndarray] = []
    ub_cols: list[np.ndarray] = []
    ub_vals: list[np.ndarray] = []
    n_var = n_ub = 0
    for i, j in enumerate(jobs):
        span = j.end - j.first
        if j.work < 1 or span < j.work or j.end > len(ci):
            raise SpecError(f"carbon bound: job {i} ({j}) does not fit its window "
                            f"or the trace ({len(ci)} slots)")
        # x: span × k work increments (slot-major), then z: one per slot after a + d.
        n_x, n_z = span * k, span - j.work
        per_unit = (ci[j.first:j.end, None] * (d_power / d_speed)[None, :]).ravel()
        cost += [per_unit * j.gpus * to_g, np.zeros(n_z)]
        energy += [np.tile(d_power / d_speed, span) * j.gpus * SLOT_S, np.zeros(n_z)]
        upper += [np.tile(d_speed, span), np.ones(n_z)]
        eq_cols.append(n_var + np.arange(n_x))
        x0, z0 = n_var, n_var + n_x
        # x_sk − Δ_k z_s ≤ 0 for the slots after a + d.
        tail = np.arange(j.work * k, n_x)
        rows = n_ub + np.arange(len(tail))
        zi = z0 + (tail // k - j.work)
        ub_rows += [rows, rows]
        ub_cols += [x0 + tail, zi]
        ub_vals += [np.ones(len(tail)), -d_speed[tail % k]]
        n_ub += len(tail)
        # z_{s+1} − z_s ≤ 0.
        if n_z > 1:
            rows = n_ub + np.arange(n_z - 1)
            ub_rows += [rows, rows]
            ub_cols += [z0 + 1 + np.arange(n_z - 1), z0 + np.arange(n_z - 1)]
            ub_vals += [np.ones(n_z - 1), -np.ones(n_z - 1)]
            n_ub += n_z - 1
        # The wait budget row (the last one) takes every z.
        ub_rows.append(np.full(n_z, -1))
        ub_cols.append(z0 + np.arange(n_z))
        ub_vals.append(np.ones(n_z))
        n_var += n_x + n_z
    rows_all = np.concatenate(ub_rows)
    rows_all[rows_all < 0] = n_ub
    a_ub = sp.csr_matrix((np.concatenate(ub_vals), (rows_all, np.concatenate(ub_cols))),
                         shape=(n_ub + 1, n_var))
    b_ub = np.zeros(n_ub + 1)
    b_ub[-1] = avg_wait_slots * len(jobs)
    eq_r = np.concatenate([np.full(len(c), i) for i, c in enumerate(eq_cols)])
    a_eq = sp.csr_matrix((np.ones(len(eq_r)), (eq_r, np.concatenate(eq_cols))),
                         shape=(len(jobs), n_var))
    b_eq = np.array([float(j.work) for j in jobs])
    ub = np.concatenate(upper)
    res = linprog(np.concatenate(cost), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq,
                  bounds=np.column_stack([np.zeros(n_var), ub]), method="highs")
    if res.status != 0:
        raise SpecError(f"carbon bound: HiGHS did not solve the LP: {res.message}")
    return float(res.fun), float(np.concatenate(energy) @ res.x)


def carbon_lower_bound(
    jobs: Sequence[ShiftJob], trace: CarbonTrace, flavor: GpuFlavor, avg_wait_s: float,
    model: PowerModel | None = None, count: str = "gaia",
) -> CarbonBound:
    """A lower bound on the carbon of any cloud-study schedule of ``jobs`` (every policy of
    :func:`~tessera.sim.carbon_shift.run_shift`, and any other with the same power model and
    slots) whose average wait is at most ``avg_wait_s``.

    Raises:
        SpecError: an unknown count, a negative wait, or no jobs.
    """
    steps = counted_hull(len(jobs), flavor, model, count, "carbon bound")
    slots = [_slots(j) for j in jobs]
    grid = _Grid(trace, max(e for _, _, e in slots) + 1)
    bjobs = [BoundJob(a, d, e, j.gpus) for (a, d, e), j in zip(slots, jobs, strict=True)]
    carbon_g, energy_j = bound_lp(grid.ci, bjobs, steps, avg_wait_s / SLOT_S)
    return CarbonBound(carbon_g / 1e3, energy_j / 3.6e6, avg_wait_s)
