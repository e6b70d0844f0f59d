"""The pipeline planner's search over flavor orders, round by round (:class:`OrderSearch`),
with the memory of capped answers that lets a tighter round reuse a looser one
(:class:`Capped`, :func:`looser`). The walk that drives it is :mod:`tessera.plan.pipeline`."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.plan.pipeline_dp import OrderResult, RoundCaps, solve_order, widths_up_to
from tessera.plan.stages import StageCosts


@dataclass(frozen=True, slots=True)
class Capped:
    """A least-Σt answer under caps (τ, α) (``None``: nothing meets them), with its plan's
    Σt, largest stage time and largest sync time."""

    tau_s: float
    alpha_s: float
    result: OrderResult | None
    sum_s: float
    max_t_s: float
    max_a_s: float

    @classmethod
    def of(cls, tau_s: float, alpha_s: float, r: OrderResult | None) -> Capped:
        if r is None:
            return cls(tau_s, alpha_s, None, math.inf, 0.0, 0.0)
        return cls(tau_s, alpha_s, r, r.sum_time_s, max(x.time_s for x in r.stages),
                   max(x.allreduce_s for x in r.stages))


def looser(solved: Sequence[Capped], tau_s: float, alpha_s: float) -> Capped | None:
    """An earlier answer that is also the answer under caps (τ, α), if any.

    Caps only remove plans, so an answer under looser caps (τ' ≥ τ, α' ≥ α) whose plan meets
    the tighter caps is the tighter problem's answer (the least Σt of a larger set, and in
    it); if nothing met the looser caps, nothing meets the tighter ones. (For whole rounds:
    orders skipped then are skipped now, since the incumbent only improves.)
    """
    for x in reversed(solved):
        if x.tau_s >= tau_s and x.alpha_s >= alpha_s and (
                x.result is None or (x.max_t_s <= tau_s and x.max_a_s <= alpha_s)):
            return x
    return None


class OrderSearch:
    """One model × groups × config: the DP over all flavor orders, round by round.

    Besides whole rounds, it remembers each flavor order's own capped answers: a later round
    with tighter caps re-solves an order only when the order's answer under looser caps breaks
    the new ones (caps only remove plans, so an answer that meets them stays the least Σt),
    and skips an order whose least Σt under looser caps plus ``(M − 1)·W`` already reaches the
    best step time (W: the order's least ``max_s (t_s + A_s/(M − 1))``, see
    :meth:`order_bound`).
    """

    def __init__(self, sc: StageCosts) -> None:
        self.sc = sc
        self.orders = list(itertools.permutations(range(len(sc.groups))))
        self.rounds = 0
        # per order: least Σt, least max t and least max(t + A/(M−1)) over all its plans
        # (filled by the uncapped rounds)
        self.least_sum: dict[tuple[int, ...], float] = {}
        self.least_max: dict[tuple[int, ...], float] = {}
        self.least_weighted: dict[tuple[int, ...], float] = {}
        # capped least-Σt rounds solved so far: (τ, α, result, its max t, its max A)
        self._solved: list[Capped] = []
        self._by_order: dict[tuple[int, ...], list[Capped]] = {o: [] for o in self.orders}
        self.reused = 0
        self.floor_t_s = 0.0     # a lower bound on every plan's bottleneck (t_bal)

    def order_bound(self, order: tuple[int, ...], sum_s: float = 0.0) -> float:
        """Lower bound on the step time of every plan of ``order`` whose Σt is at least
        ``sum_s``: ``max(Σt_min, sum_s) + (M−1)·W`` with W the order's least
        ``max_s (t_s + A_s/(M−1))`` (for every plan ``(M−1)·W ≤ (M−1)·max t + max A``)."""
        m1 = self.sc.config.n_micro - 1
        return max(self.least_sum.get(order, 0.0), sum_s) + m1 * max(
            self.least_max.get(order, 0.0), self.least_weighted.get(order, 0.0), self.floor_t_s)

    def solve(self, tau_s: float, alpha_s: float, *, bottleneck: bool = False,
              best_step_s: float = math.inf, sync_weight: float = 0.0) -> OrderResult | None:
        """Best plan under the caps over the flavor orders that could still beat
        ``best_step_s`` (``sync_weight``: see :class:`~tessera.plan.pipeline_dp.RoundCaps`)."""
        plain = not bottleneck and not sync_weight
        if plain and (known := looser(self._solved, tau_s, alpha_s)) is not None:
            self.reused += 1
            return known.result
        caps = RoundCaps(tau_s, alpha_s, sync_weight)
        uncapped = math.isinf(tau_s) and math.isinf(alpha_s)
        best: OrderResult | None = None
        for order in self.orders:
            r = self._solve_order(order, caps, bottleneck, best_step_s)
            if uncapped:
                value = r.sum_time_s if r is not None else math.inf
                (self.least_weighted if sync_weight else
                 self.least_max if bottleneck else self.least_sum)[order] = value
            if r is not None and (best is None or r.sum_time_s < best.sum_time_s):
                best = r
        self.rounds += 1
        if plain:
            self._solved.append(Capped.of(tau_s, alpha_s, best))
        return best

    def _solve_order(self, order: tuple[int, ...], caps: RoundCaps, bottleneck: bool,
                     best_step_s: float) -> OrderResult | None:
        """One order's answer: from an earlier looser round when that answers it, ``None``
        when the order cannot beat ``best_step_s``, else by its DP."""
        plain = not bottleneck and not caps.sync_weight
        if not plain:
            if self.order_bound(order) >= best_step_s:
                return None
            return solve_order(self.sc, order, caps, bottleneck=bottleneck)
        memo = self._by_order[order]
        if (known := looser(memo, caps.tau_s, caps.alpha_s)) is not None:
            return known.result
        floor = max((x.sum_s for x in memo if x.tau_s >= caps.tau_s and x.alpha_s >= caps.alpha_s),
                    default=0.0)
        if self.order_bound(order, floor) >= best_step_s:
            return None
        r = solve_order(self.sc, order, caps)
        memo.append(Capped.of(caps.tau_s, caps.alpha_s, r))
        return r

    def candidates(self) -> tuple[list[float], list[float]]:
        """Sorted distinct stage times and gradient-sync times of options that fit at all."""
        ts: list[np.ndarray] = []
        As: list[np.ndarray] = []
        for gi, g in enumerate(self.sc.groups):
            for w in widths_up_to(g.count):
                for opt in self.sc.options(gi, w):
                    c = self.sc.option_cost(gi, opt)
                    ok = (c.fmax >= 1) & np.isfinite(c.time_s)
                    ts.append(c.time_s[ok])
                    As.append(c.allreduce_s[ok])
        t_all = np.unique(np.concatenate(ts)) if ts else np.array([])
        a_all = np.unique(np.concatenate(As)) if As else np.array([])
        return [float(x) for x in t_all], [float(x) for x in a_all]
