"""Max-min fairness: give the worst-off job as much as possible.

Every job ``m`` gets a *normalised rate* ``Σ_j a[m, j] · X[m, j]`` -- its throughput under the
shares ``X``, divided by what "fair" would give it, so that 1 means "as well off as with an
equal slice". The LP is::

    maximise  z
    subject to  z <= Σ_j a[m, j] X[m, j]   for every job that can run anywhere
                base constraints (see :mod:`.problem`)

Policies differ only in ``a``: Gavel's LAS uses ``T · sf / (w · P)`` with ``P`` a reference
throughput; the heterogeneity-agnostic twin uses ``sf / w`` (all GPUs alike); makespan
minimisation uses ``T / R`` (the fraction of the remaining work done per second).

**Symmetry reduction.** Jobs with identical rows (same ``a``, same usable flavors, same gang
size) are interchangeable: averaging an optimal solution over permutations of them keeps it
feasible and optimal, so an optimal solution exists that treats them alike. We solve one row
per *class* of identical jobs, the class size multiplying its capacity use. A trace drawn from
26 job types × 4 gang sizes has at most ~100 classes however many jobs are active, which keeps a
2,048-job round in milliseconds. The equal split is also what an interior-point solver returns.
``--compat gavel`` turns the reduction off, to pose exactly Gavel's LP.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tessera.sched.core.lp import INF, LpModel
from tessera.sched.gavel.problem import JobClasses, ShareProblem, Variables
from tessera.sched.gavel.solver import Backend, Solved, solve_ecos


def max_min_shares(
    p: ShareProblem,
    a: np.ndarray,
    backend: Backend,
    what: str = "max-min fairness LP",
    gavel_form: bool = False,
) -> Solved:
    """``max min_m Σ_j a[m, j] X[m, j]`` under the base constraints.

    Args:
        p: the problem.
        a: ``M × J`` normalised-rate coefficients.
        backend: method and HiGHS instance.
        what: the LP's name in errors and fallback notes.
        gavel_form: pose Gavel's exact LP (a variable for every pair, no symmetry reduction);
            otherwise only runnable pairs are variables and identical jobs are merged.

    Returns:
        ``Solved`` with ``x`` (never ``None``) and ``value`` = the minimum rate.

    Raises:
        SolverError: HiGHS found no optimum (the base constraints are always feasible, so this
            means a numerical failure).
    """
    m_count, j_count = p.shape
    if m_count == 0:
        return Solved(np.zeros((0, j_count)), value=0.0)
    fallbacks: tuple[str, ...] = ()
    if backend.method == "ecos":
        x = _ecos(p, a)
        if x is not None:
            return Solved(x)
        fallbacks = (f"{what}: ECOS returned no solution; solved with HiGHS IPM instead",)
    if gavel_form:
        x, z = _lp(p, a, Variables.every_pair(p), backend, what)
        return Solved(x, fallbacks, z)
    usable = (p.tput > 0).astype(float)
    c = JobClasses.of(np.hstack([a * usable, usable, p.scale[:, None]]))
    reduced = c.reduce(p)
    x_c, z = _lp(reduced, a[c.first], Variables.runnable(reduced), backend, what)
    return Solved(x_c[c.inverse], fallbacks, z)


def _lp(
    p: ShareProblem, a: np.ndarray, v: Variables, backend: Backend, what: str
) -> tuple[np.ndarray, float]:
    """The max-min LP over the columns ``v``; returns ``(X, z)``."""
    if len(v) == 0:
        return np.zeros(p.shape), 0.0
    n = len(v)
    mat, live = max_min_rows(p, a, v)
    upper = np.concatenate([np.ones(p.shape[0]), p.capacity])
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    sol = backend.lp.solve(
        LpModel(cost, mat, np.full(mat.shape[0], -INF),
                np.concatenate([upper, np.zeros(len(live))]), np.zeros(n + 1),
                np.concatenate([np.full(n, v.x_upper), [INF]]), maximize=True),
        what=what, method=backend.lp_method,
    )
    return v.scatter(sol), float(sol[-1])


def max_min_rows(p: ShareProblem, a: np.ndarray, v: Variables
                 ) -> tuple[sp.csc_matrix, np.ndarray]:
    """The LP's constraint matrix, column by column, and the jobs with columns (sorted).

    Rows: the base constraints (:func:`~tessera.sched.gavel.problem.base_constraints`: one
    per job, then one per flavor), then one fairness row ``z - a_m · X_m <= 0`` per job with
    columns. Column ``k`` (the pair ``(m, j)``) holds 1 in job row ``m``, ``sf_m`` in flavor
    row ``j`` and ``-a[m, j]`` in ``m``'s fairness row; the last column (``z``) holds 1 in
    every fairness row. Written straight into compressed-column arrays: the same arrays,
    zeros included, that stacking the blocks with scipy gives (a round built them that way
    at ten times the cost), so the solver sees the same model.
    """
    m_count, j_count = p.shape
    rows, cols = v.rows, v.cols
    n = len(rows)
    live = v.jobs_with_columns()
    fair_count = len(live)
    pos = np.full(m_count, -1, dtype=np.intp)
    pos[live] = np.arange(fair_count)
    index = np.empty((n, 3), dtype=np.int32)
    index[:, 0] = rows
    index[:, 1] = m_count + cols
    index[:, 2] = m_count + j_count + pos[rows]
    value = np.empty((n, 3))
    value[:, 0] = 1.0
    value[:, 1] = p.scale[rows]
    value[:, 2] = (-a)[rows, cols]
    first_fair = m_count + j_count
    indices = np.concatenate(
        [index.reshape(-1), np.arange(first_fair, first_fair + fair_count, dtype=np.int32)])
    data = np.concatenate([value.reshape(-1), np.ones(fair_count)])
    indptr = np.append(np.arange(0, 3 * n + 1, 3), 3 * n + fair_count).astype(np.int32)
    return sp.csc_matrix((data, indices, indptr),
                         shape=(first_fair + fair_count, n + 1)), live


def _ecos(p: ShareProblem, a: np.ndarray) -> np.ndarray | None:
    """Gavel's own cvxpy formulation, solved by ECOS; ``None`` when ECOS gives nothing."""
    import cvxpy as cp  # lazy: optional gavel-compat extra, +1.2 s

    x = cp.Variable(p.shape)
    return solve_ecos(p, cp.Maximize(cp.min(cp.sum(cp.multiply(a, x), axis=1))), x)
