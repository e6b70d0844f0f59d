"""Max-sum throughput: make the cluster as a whole do as many steps per second as it can.

Gavel's ``max_sum_throughput_perf`` (``ThroughputSumWithPerf``: the cost-normalised policy with
every instance cost 1 and no SLOs) is the LP::

    maximise  Σ_m Σ_j T[m, j] · X[m, j]
    subject to  base constraints (see :mod:`.problem`)

``T[m, j]`` is the whole gang's steps/s on flavor ``j``. Nothing scales ``T`` per job (no gang
size, no priority weight, no reference throughput), so the objective adds up steps of different
jobs as if they were the same unit of work. It is an efficiency objective with no notion of
fairness (Gavel's paper offers it as such, next to its fairness policies), and two things follow:

* **slow jobs starve.** GPUs go to the jobs that add the most steps/s per GPU they take
  (``T[m, j] / sf_m``, all flavors weighed at once); a job that is slow everywhere, or a gang
  whose throughput does not grow with its size, can get a zero share for as long as
  faster-stepping jobs keep the flavor full (the round mechanism only hands it GPUs nobody with
  a share wants);
* **the answer depends on what a "step" is.** A model with a small batch makes many cheap steps
  per second and looks more valuable than one with large, expensive steps.

**Degeneracy and the solver.** The optimum is often a whole face (two identical jobs can split
a flavor any way). ECOS, Gavel's solver, stops near the centre of that face; HiGHS' simplex at a
vertex. Jobs with identical rows (same ``T``, same gang size) are therefore merged into one class
(as in :mod:`.maxmin`): each member gets the class's per-member share, the equal split an
interior-point solver returns. ``gavel_form`` turns the reduction off to pose exactly Gavel's LP.
"""

from __future__ import annotations

import numpy as np

from tessera.sched.core.lp import INF, LpModel
from tessera.sched.gavel.problem import JobClasses, ShareProblem, Variables, base_constraints
from tessera.sched.gavel.solver import Backend, Solved, solve_ecos


def max_sum_shares(
    p: ShareProblem,
    backend: Backend,
    what: str = "max-sum throughput LP",
    gavel_form: bool = False,
) -> Solved:
    """``max Σ_m Σ_j T[m, j] X[m, j]`` under the base constraints.

    Args:
        p: the problem (``p.tput`` is the objective's coefficients; weights are unused, as in
            Gavel).
        backend: method and HiGHS instance.
        what: the LP's name in errors and fallback notes.
        gavel_form: pose Gavel's exact LP (a variable for every pair, no class merging).

    Returns:
        ``Solved`` with ``x`` (never ``None``) and ``value`` = the total throughput (steps/s;
        ``nan`` when ECOS answered).

    Raises:
        SolverError: HiGHS found no optimum (the base constraints are always feasible and the
            objective is bounded by them, so this means a numerical failure).
    """
    m_count, j_count = p.shape
    if m_count == 0:
        return Solved(np.zeros((0, j_count)), value=0.0)
    fallbacks: tuple[str, ...] = ()
    if backend.method == "ecos":
        x = _ecos(p)
        if x is not None:
            return Solved(x)
        fallbacks = (f"{what}: ECOS returned no solution; solved with HiGHS IPM instead",)
    if gavel_form:
        x, total = _lp(p, p.tput, Variables.every_pair(p), backend, what)
        return Solved(x, fallbacks, total)
    c = JobClasses.of(np.hstack([p.tput, p.scale[:, None]]))
    reduced = c.reduce(p)
    gain = p.tput[c.first] * c.counts[:, None]
    x_c, total = _lp(reduced, gain, Variables.runnable(reduced), backend, what)
    return Solved(x_c[c.inverse], fallbacks, total)


def _lp(
    p: ShareProblem, gain: np.ndarray, v: Variables, backend: Backend, what: str
) -> tuple[np.ndarray, float]:
    """The max-sum LP over the columns ``v`` with objective ``Σ gain · X``; ``(X, value)``."""
    if len(v) == 0:
        return np.zeros(p.shape), 0.0
    base, upper = base_constraints(p, v)
    n = len(v)
    sol = backend.lp.solve(
        LpModel(gain[v.rows, v.cols], base, np.full(base.shape[0], -INF), upper,
                np.zeros(n), np.full(n, v.x_upper), maximize=True),
        what=what, method=backend.lp_method,
    )
    return v.scatter(sol), float(gain[v.rows, v.cols] @ sol)


def _ecos(p: ShareProblem) -> np.ndarray | None:
    """Gavel's own cvxpy formulation (row sums, then their sum), solved by ECOS."""
    import cvxpy as cp  # lazy: optional gavel-compat extra, +1.2 s

    x = cp.Variable(p.shape)
    return solve_ecos(p, cp.Maximize(cp.sum(cp.sum(cp.multiply(p.tput, x), axis=1))), x)
