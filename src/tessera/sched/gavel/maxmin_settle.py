"""Max-min fairness, second stage: one well-defined allocation among the near-optimal ones.

The max-min LP (:mod:`.maxmin`) pins only the *minimum* normalised rate ``t*``. Every job
that is not a bottleneck can be given its slack in many ways, and a simplex solver returns
whichever vertex its path reaches. Which vertex that is can turn on a 1 % difference in the
speeds: two near-identical jobs (the same model seen with slightly different estimates) stop
being one class and the vertex gives one the A100s and the other the T4s. Under
``--speeds learned`` that decided the average JCT of ``max_min_fairness`` on Sia's
sia-philly-2 (0.97-1.15 of the table's JCT under a 1 % speed error).

The second stage keeps the first stage's fairness and makes the choice unique and continuous
in the speeds. With ``r_m = Σ_j a[m, j] X[m, j]`` (job ``m``'s normalised rate) and
``â_m = max_j a[m, j]`` (its best one), it solves::

    maximise   Σ_m  ( r_m  −  (ridge / 2) · â_m · Σ_j X[m, j]² )
    subject to r_m >= (1 − slack) · t*   for every job that can run,
               the base constraints (:mod:`.problem`)

* ``Σ_m r_m``: total normalised throughput -- the capacity above the fairness floor goes
  where it buys the most progress (the Pareto-efficient direction);
* the ridge: diminishing returns on any one job's share of any one flavor, in the units of
  the job's own objective term (``â_m``), so the same ``ridge`` means the same at any load.
  It makes the objective strongly concave in ``X`` (modulus ``ridge · â_m``), so the optimum
  is unique and moves continuously with the speeds: a relative change ``δ`` in the speeds
  moves a share by about ``δ / ridge`` at most (1 % → 0.1 at ``ridge = 0.1``) where a vertex
  can jump by 1. Interchangeable jobs get equal shares (as the class reduction already gives
  them), near-interchangeable ones nearly equal shares. It does not throttle: a job's whole
  share on its best flavor still gains ``(1 − ridge) · â_m``.
* ``slack``: the fairness floor may give up this fraction of ``t*`` (default 0: none).

``ridge = 0`` is the plain LP second stage (a vertex again: measured less stable). HiGHS
solves the QP (its active-set QP solver); identical jobs are merged into classes as in the
first stage (the class size multiplies its terms). ``--compat gavel`` never comes here: its
twin (:class:`~tessera.sched.gavel.compat.GavelMaxMinFairness`) poses Gavel's LP as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tessera.sched.core.lp import INF, LpModel
from tessera.sched.gavel.maxmin import max_min_rows, max_min_shares
from tessera.sched.gavel.problem import JobClasses, ShareProblem, Variables
from tessera.sched.gavel.solver import Backend, Solved

#: HiGHS' QP iterations allowed per column before the second stage gives up (and keeps the
#: first stage's vertex, saying so): its active-set method stalled on 1 of the
#: 5 noisy sia-philly-2 runs at ridge 0.05 / slack 0.01 (minutes on one solve); a solve that
#: converges takes 1.3 iterations per column (median; at most 2.9 over the 229 QPs of
#: the sia-philly-1/2 runs, learned and noisy, at the defaults).
QP_ITERATIONS_PER_COLUMN = 20


@dataclass(frozen=True, slots=True)
class Settle:
    """The second stage's settings (see the module docstring).

    Attributes:
        slack: fraction of the max-min value ``t*`` the floor may give up, in ``[0, 1)``.
        ridge: weight of the diminishing-returns term; ``0``: the plain LP second stage.
    """

    slack: float = 0.0
    ridge: float = 0.1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.slack) and 0.0 <= self.slack < 1.0):
            raise ValueError(f"settle slack {self.slack!r}: must be in [0, 1)")
        if not (math.isfinite(self.ridge) and self.ridge >= 0.0):
            raise ValueError(f"settle ridge {self.ridge!r}: must be a finite number >= 0")


def settled_max_min_shares(
    p: ShareProblem, a: np.ndarray, backend: Backend, settle: Settle | None,
    what: str = "max-min fairness LP",
) -> Solved:
    """Max-min shares (:func:`~tessera.sched.gavel.maxmin.max_min_shares`), then, unless
    ``settle`` is ``None``, the second stage over the same classes of identical jobs.

    Returns:
        ``Solved`` with ``x`` and ``value`` = the first stage's minimum rate ``t*``; when the
        second stage does not reach an optimum, the first stage's shares, with a fallback
        note saying so.
    """
    first = max_min_shares(p, a, backend, what)
    if settle is None or first.x is None or p.shape[0] == 0:
        return first
    usable = p.tput > 0
    rates = (a * first.x * usable).sum(axis=1)
    runnable = usable.any(axis=1)
    if not runnable.any():
        return first
    t_star = float(rates[runnable].min())
    if not (math.isfinite(t_star) and t_star > 0):
        return first
    classes = JobClasses.of(np.hstack([a * usable, usable, p.scale[:, None]]))
    reduced = classes.reduce(p)
    a_c = a[classes.first]
    v = Variables.runnable(reduced)
    x_c = _second_stage(reduced, a_c, classes.counts, v, t_star, settle, backend)
    if x_c is None:
        note = f"{what}: the second stage found no optimum; kept the first stage's vertex"
        return Solved(first.x, (*first.fallbacks, note), first.value)
    return Solved(x_c[classes.inverse], first.fallbacks, t_star)


def _second_stage(p: ShareProblem, a: np.ndarray, counts: np.ndarray, v: Variables,
                  t_star: float, settle: Settle, backend: Backend) -> np.ndarray | None:
    """The QP (or LP, ``ridge == 0``) of the module docstring on the class problem ``p``;
    dense class shares, or ``None`` when HiGHS reports no optimum."""
    n = len(v)
    if n == 0:
        return np.zeros(p.shape)
    mat, live = max_min_rows(p, a, v)
    coef = a[v.rows, v.cols]
    weight = counts[v.rows].astype(float)
    cost = np.zeros(n + 1)
    cost[:n] = -weight * coef  # (minimised: −Σ r)
    floor = (1.0 - settle.slack) * t_star
    upper = np.concatenate([np.ones(p.shape[0]), p.capacity, np.zeros(len(live))])
    model = LpModel(cost, mat, np.full(mat.shape[0], -INF), upper,
                    np.concatenate([np.zeros(n), [floor]]),
                    np.concatenate([np.full(n, v.x_upper), [floor]]), maximize=False)
    lp = backend.lp
    lp.load(model)
    if settle.ridge > 0:
        lp.set_hessian(_hessian(v, coef, weight, settle), QP_ITERATIONS_PER_COLUMN * (n + 1))
    out = lp.run()
    if out.x is None:
        return None
    return v.scatter(out.x)


def _hessian(v: Variables, coef: np.ndarray, weight: np.ndarray, settle: Settle
             ) -> sp.csc_matrix:
    """The QP's diagonal ``Q`` over the columns of ``v`` and ``z`` (last, zero): for the pair
    ``(m, j)``, ``ridge · weight_m · â_m`` (``weight``: the class's size; ``â_m``: the job's
    best normalised rate)."""
    n = len(v)
    best = np.zeros(v.shape[0])
    np.maximum.at(best, v.rows, coef)
    diag = np.zeros(n + 1)
    diag[:n] = settle.ridge * weight * best[v.rows]
    return sp.diags(diag, format="csc")
