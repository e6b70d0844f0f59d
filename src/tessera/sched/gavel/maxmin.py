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

from tessera.sched.gavel.problem import JobClasses, ShareProblem, Variables, base_constraints
from tessera.sched.gavel.solver import Backend, Solved, solve_ecos
from tessera.sched.lp import INF, LpModel


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
    base, upper = base_constraints(p, v)
    live = v.jobs_with_columns()
    fair = v.per_job(-a, live)  # z - a_m · X_m <= 0
    z_col = sp.vstack(
        [sp.csr_matrix((base.shape[0], 1)), sp.csr_matrix(np.ones((len(live), 1)))]
    )
    mat = sp.hstack([sp.vstack([base, fair]), z_col]).tocsc()
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    sol = backend.lp.solve(
        LpModel(cost, mat, np.full(mat.shape[0], -INF),
                np.concatenate([upper, np.zeros(len(live))]), np.zeros(n + 1),
                np.concatenate([np.full(n, v.x_upper), [INF]]), maximize=True),
        what=what, method=backend.lp_method,
    )
    return v.scatter(sol), float(sol[-1])


def _ecos(p: ShareProblem, a: np.ndarray) -> np.ndarray | None:
    """Gavel's own cvxpy formulation, solved by ECOS; ``None`` when ECOS gives nothing."""
    import cvxpy as cp

    x = cp.Variable(p.shape)
    return solve_ecos(p, cp.Maximize(cp.min(cp.sum(cp.multiply(a, x), axis=1))), x)
