"""The exact choice of power limits under a budget: a small multiple-choice knapsack.

The budget stage's greedy (:func:`tessera.sched.core.power_budget.budget_stage`, mode
``flow``) lowers limits one step at a time where the weighted throughput lost per watt saved
is least. That is optimal when every job's loss grows faster than its savings as its limit
falls (a convex curve) and the last step is divisible; neither holds exactly (Zeus's measured
rows are not convex, and a step is a whole job's). Mode ``exact`` solves the same problem
exactly instead:

    minimise   Σ_j  w_j · g_j · (1 − s_j(l_j))        (weighted throughput lost)
    subject to Σ_j  g_j · p_j(l_j)  ≤  budget − rest   (the cluster's watts)

over one level ``l_j`` per job, where ``g_j`` is its GPU count, ``w_j`` its weight
(:mod:`tessera.sched.core.power_weights`), ``s_j`` its relative speed and ``p_j`` its draw per
GPU at a level, and ``rest`` the draw of what is not capped (idle GPUs, mixed gangs). With
nobody waiting ``w_j · g_j`` is 1 and the sum is the completion time the caps add per second
that they last, summed over the jobs -- the brief's objective. Jobs with the same (type,
model, flavor, weight, GPU count) are interchangeable, so the problem is solved over
*classes*: one integer per (class, level), how many of the class's jobs run at that level --
a few hundred integers even at 2,048 jobs.

The solver is HiGHS's MIP (``scipy.optimize.milp``) under a node limit (deterministic:
the same snapshot gives the same limits on any machine) for rounds of at most
``MAX_CLASSES`` classes; past either, or when even the lowest limits do not fit,
:func:`solve_classes` returns ``None`` and the stage keeps the greedy's answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

__all__ = ["LimitClass", "class_loss", "solve_classes"]

MAX_CLASSES = 64
"""Above this many classes the stage does not try: the greedy answers (at 2,048 jobs a round
has ~200 classes and the solver alone costs more than the whole plain decision)."""

NODE_LIMIT = 2000
"""Branch-and-bound nodes the solver may explore before it gives up (a count, not a clock,
so a simulation gives the same answer however loaded the machine is)."""

DEFAULT_TIME_LIMIT_S = 2.0
"""A safety net only: wall-clock seconds per decision (``NODE_LIMIT`` is what binds)."""


@dataclass(frozen=True, slots=True)
class LimitClass:
    """``count`` interchangeable jobs, each with a cost and a draw per level.

    Attributes:
        count: how many jobs (>= 1).
        cost: per job, the weighted throughput lost at each level (level 0, the maximum
            limit, costs 0).
        watts: per job, the draw at each level in watts (all of its GPUs), from the top down.
    """

    count: int
    cost: tuple[float, ...]
    watts: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a limit class needs at least one job, got {self.count}")
        if not self.cost or len(self.cost) != len(self.watts):
            raise ValueError(f"a limit class needs one cost per draw, got {len(self.cost)} "
                             f"costs and {len(self.watts)} draws")


def class_loss(classes: Sequence[LimitClass], counts: Sequence[Sequence[int]]) -> float:
    """The objective of ``counts`` (jobs per class per level): the weighted loss summed."""
    return sum(n * c for cl, row in zip(classes, counts, strict=True)
               for n, c in zip(row, cl.cost, strict=True))


def class_watts(classes: Sequence[LimitClass], counts: Sequence[Sequence[int]]) -> float:
    """The draw of ``counts``, in watts."""
    return sum(n * w for cl, row in zip(classes, counts, strict=True)
               for n, w in zip(row, cl.watts, strict=True))


def solve_classes(classes: Sequence[LimitClass], cap_w: float,
                  time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                  ) -> tuple[tuple[int, ...], ...] | None:
    """How many jobs of each class run at each level so the classes draw at most ``cap_w``
    with the least total cost; ``None`` if no such choice exists, there are more than
    ``MAX_CLASSES`` classes, or the solver does not prove one optimal within ``NODE_LIMIT``
    nodes (or ``time_limit_s`` seconds)."""
    if not classes:
        return () if cap_w >= 0 else None
    if len(classes) > MAX_CLASSES:
        return None
    if sum(cl.count * min(cl.watts) for cl in classes) > cap_w:
        return None
    offsets, n = [], 0
    for cl in classes:
        offsets.append(n)
        n += len(cl.cost)
    cost = np.zeros(n)
    watts = np.zeros(n)
    upper = np.zeros(n)
    one_each = np.zeros((len(classes), n))
    for k, (cl, off) in enumerate(zip(classes, offsets, strict=True)):
        m = len(cl.cost)
        cost[off:off + m] = cl.cost
        watts[off:off + m] = cl.watts
        upper[off:off + m] = cl.count
        one_each[k, off:off + m] = 1.0
    counts = np.array([cl.count for cl in classes], dtype=float)
    # a hair under the cap: HiGHS accepts a row violated by its feasibility tolerance
    room = cap_w - 1e-6 * max(1.0, abs(cap_w))
    res = milp(cost, integrality=np.ones(n), bounds=Bounds(np.zeros(n), upper),
               constraints=[LinearConstraint(watts[None, :], -np.inf, room),
                            LinearConstraint(one_each, counts, counts)],
               options={"time_limit": time_limit_s, "node_limit": NODE_LIMIT,
                        "mip_rel_gap": 1e-9, "disp": False})
    if res.status != 0 or res.x is None:
        return None
    x = np.rint(res.x).astype(int)
    out = tuple(tuple(int(v) for v in x[off:off + len(cl.cost)])
                for cl, off in zip(classes, offsets, strict=True))
    if (any(sum(row) != cl.count for cl, row in zip(classes, out, strict=True))
            or class_watts(classes, out) > cap_w):
        return None  # rounding broke a constraint: let the greedy answer
    return out
