"""A power limit per slot: more work in clean slots, less in dirty ones (issue 34, 3c).

One power limit for a whole job (Zeus's minimum-energy limit) minimises its *energy*; its
*carbon* is minimised by a limit per slot. At limit ``L`` a slot does ``speed(L)`` of the job's
work (1 at full power) and draws ``P(L)``; over the slots ``s`` it may run in, with intensity
``c_s``, the plan minimises ``Σ c_s · P(L_s)`` such that ``Σ speed(L_s) = work`` (``L_s`` may
be "off": no work, no draw). A slot's options are the points ``(speed, P)`` of the power
model's limits and ``(0, 0)``; only the lower convex hull of them is ever worth using (a point
above it is beaten by running part of the slot at each of its neighbours), so each slot offers
*increments* of work, hull step by hull step, each at ``c_s × ΔP / Δspeed`` grams per unit of
work -- rising within a slot. Taking the cheapest increments over all slots until the work is
done is optimal (a fractional knapsack; at most one increment is taken in part: that slot runs
part of its time at one limit and the rest at the next). The outcome: clean slots run at full
power (as much work as possible there), dirtier ones at low limits or not at all.

Example (levels ``(speed 1, 196.5 W)`` and ``(0.68, 117.5 W)``; hull steps ``0 → 0.68`` at
172.8 W per unit of work and ``0.68 → 1`` at 246.9 W per unit): with 2 slots of intensity 100
and 150 g/kWh and 1.5 units of work, the increments cost 17,279, 24,688, 25,919 and 37,031
(g/kWh × W per unit): the plan takes the clean slot's two (1.0 unit) and 0.5 unit of the
dirty slot's first -- full power in the clean slot, 117.5 W for 74 % of the dirty one.
Measured on the cloud study (``benchmarks/bench_carbon_shift.py --slot-limits``), the gain
over one limit per job is small (docs/energy.md): the full-power step costs 1.43× the
low-limit step per unit of work, and a job's window rarely holds slots that much cleaner.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

__all__ = ["hull_steps", "plan_per_slot"]


def hull_steps(levels: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The ``(Δspeed, Δpower_w)`` steps of the lower convex hull of ``(0, 0)`` and the
    ``(speed, power_w)`` levels, slowest first (their ``Δpower / Δspeed`` rises)."""
    best: dict[float, float] = {}
    for speed, power in levels:
        if speed > 0:
            best[speed] = min(power, best.get(speed, float("inf")))
    hull: list[tuple[float, float]] = [(0.0, 0.0)]
    for p in sorted(best.items()):
        while len(hull) >= 2:
            (ox, oy), (ax, ay) = hull[-2], hull[-1]
            if (ax - ox) * (p[1] - oy) - (ay - oy) * (p[0] - ox) > 0:
                break
            hull.pop()
        hull.append(p)
    return [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(hull)]


def plan_per_slot(ci: np.ndarray, steps: Sequence[tuple[float, float]], work: float,
                  min_finish: int, price_per_slot: float) -> tuple[float, float, int]:
    """The cheapest per-slot-limit plan of ``work`` units in slots ``0..len(ci)-1``.

    Args:
        ci: intensity of each slot the job may run in (g/kWh), from its submission on.
        steps: :func:`hull_steps` of the power levels.
        work: the job's work in full-power slots.
        min_finish: the earliest finish (slots from the first) at full power.
        price_per_slot: what one slot of delay is worth, in the units of the carbon
            returned (``intensity × W × slots``).

    Returns:
        ``(carbon, energy, finish)``: ``Σ c_s × P_s`` over the plan (g/kWh × W per slot: the
        caller scales it to grams), ``Σ P_s`` (W × slots), and the slot after the last one
        used, minimising ``carbon + price_per_slot × (finish − min_finish)`` over the
        latest finish allowed (``len(ci)``).
    """
    n = len(ci)
    d_speed = np.array([s for s, _ in steps])
    d_power = np.array([p for _, p in steps])
    unit = d_power / d_speed  # W per unit of work, rising
    # Every slot's increments, cheapest (per unit of work) first.
    slot = np.repeat(np.arange(n), len(steps))
    amount = np.tile(d_speed, n)
    cost = (ci[:, None] * unit[None, :]).ravel()  # carbon per unit of work
    power = np.tile(d_power, n)
    order = np.argsort(cost, kind="stable")
    slot, amount, cost, power = slot[order], amount[order], cost[order], power[order]
    best: tuple[float, float, int] | None = None
    best_total = float("inf")
    for f in range(min_finish, n + 1):
        keep = slot < f
        a = amount[keep]
        cum = np.cumsum(a)
        j = int(np.searchsorted(cum, work - 1e-9))
        if j >= len(a):
            continue
        before = cum[j - 1] if j > 0 else 0.0
        part = work - before  # of the j-th increment
        c, pw, s = cost[keep], power[keep], slot[keep]
        carbon = float(np.sum(c[:j] * a[:j]) + c[j] * part)
        energy = float(np.sum(pw[:j]) + pw[j] * part / a[j])
        finish = int(max(s[: j + 1].max(), min_finish - 1)) + 1
        total = carbon + price_per_slot * (finish - min_finish)
        if total < best_total - 1e-9:
            best_total, best = total, (carbon, energy, finish)
    if best is None:
        raise ValueError(f"{work:g} slots of work do not fit in {n} slots")
    return best
