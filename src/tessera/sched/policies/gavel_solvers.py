"""The optimisation problems of Gavel's policies, solved as Gavel poses them (``--compat gavel``).

Gavel solves its policies with cvxpy and ECOS, an interior-point solver. When a problem has many
optima (max-min fairness only fixes the *minimum*; the split of the slack across flavors and
across non-bottleneck jobs is free), ECOS returns a point near the centre of the optimal face,
while a simplex solver returns a vertex. The split changes priorities and therefore JCTs, so the
solver is a setting:

* ``ecos`` -- cvxpy + ECOS, Gavel's own formulation and solver (optional extra
  ``tessera[gavel-compat]``);
* ``highs-ipm`` -- HiGHS interior point without crossover (no extra dependency; a centred
  solution, though not ECOS's exact centre);
* ``highs`` -- HiGHS default (simplex: a vertex);
* ``auto`` -- ``ecos`` when cvxpy and ECOS are importable, else ``highs-ipm``.

Matrices are dense ``m × n`` (jobs in id order × flavors in Gavel's alphabetical order
``k80, p100, v100``); variables exist for every pair, including pairs whose throughput is 0, as
in Gavel (``Policy.get_base_constraints``). Results are clipped to ``[0, 1]``.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import scipy.sparse as sp

from tessera.sched.lp import INF, SolverError, solve_lp

GavelSolver = Literal["auto", "ecos", "highs", "highs-ipm"]


def ecos_available() -> bool:
    try:
        import cvxpy  # noqa: F401
        import ecos  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_solver(solver: GavelSolver) -> Literal["ecos", "highs", "highs-ipm"]:
    """``auto`` → ``ecos`` when installed, else ``highs-ipm``; ``ecos`` must be installed."""
    if solver == "auto":
        return "ecos" if ecos_available() else "highs-ipm"
    if solver == "ecos" and not ecos_available():
        raise SolverError(
            "solver 'ecos' needs cvxpy and ecos (pip install 'tessera[gavel-compat]')"
        )
    return solver


def _base_matrix(scale: np.ndarray, n: int) -> sp.csr_matrix:
    """Rows: ``Σ_j x[i,j] <= 1`` per job, then ``Σ_i sf_i x[i,j] <= cap_j`` per flavor.

    Variables are row-major: ``x[i, j]`` is column ``i*n + j``.
    """
    m = len(scale)
    idx = np.arange(m * n)
    rows_job = idx // n
    rows_cap = m + idx % n
    data = np.concatenate([np.ones(m * n), np.repeat(scale, n)])
    return sp.csr_matrix(
        (data, (np.concatenate([rows_job, rows_cap]), np.concatenate([idx, idx]))),
        shape=(m + n, m * n),
    )


def max_min_share(
    coef: np.ndarray, scale: np.ndarray, capacity: np.ndarray, solver: GavelSolver
) -> np.ndarray:
    """``max min_i Σ_j coef[i,j]·x[i,j]`` under Gavel's base constraints; returns ``x`` (m × n)."""
    m, n = coef.shape
    if m == 0:
        return np.zeros((0, n))
    how = resolve_solver(solver)
    if how == "ecos":
        import cvxpy as cp

        x = cp.Variable((m, n))
        sfa = np.repeat(scale[:, None], n, axis=1)
        cons = [x >= 0, cp.sum(cp.multiply(sfa, x), axis=0) <= capacity, cp.sum(x, axis=1) <= 1]
        prob = cp.Problem(cp.Maximize(cp.min(cp.sum(cp.multiply(coef, x), axis=1))), cons)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prob.solve(solver="ECOS")
        if x.value is not None:
            return np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)
        how = "highs-ipm"  # Gavel would crash here; fall back rather than die
    base = _base_matrix(scale, n)
    fair = sp.csr_matrix(
        (-coef.ravel(), (np.repeat(np.arange(m), n), np.arange(m * n))), shape=(m, m * n)
    )
    z_col = sp.vstack([sp.csr_matrix((m + n, 1)), sp.csr_matrix(np.ones((m, 1)))])
    mat = sp.hstack([sp.vstack([base, fair]), z_col]).tocsc()
    cost = np.zeros(m * n + 1)
    cost[-1] = 1.0
    sol = solve_lp(
        cost, mat, np.full(mat.shape[0], -INF),
        np.concatenate([np.ones(m), capacity, np.zeros(m)]),
        np.zeros(m * n + 1), np.concatenate([np.full(m * n, INF), [INF]]),
        maximize=True, what="Gavel max-min fairness LP",
        method="ipm" if how == "highs-ipm" else "choose",
    )
    return np.clip(sol[: m * n].reshape(m, n), 0.0, 1.0)


def min_max_rho(
    tput: np.ndarray,
    scale: np.ndarray,
    capacity: np.ndarray,
    t: np.ndarray,
    remaining: np.ndarray,
    denom: np.ndarray,
    solver: GavelSolver,
) -> np.ndarray | None:
    """Finish-time fairness: ``min max_i (t_i + R_i / Σ_j T[i,j] x[i,j]) / D_i``.

    Returns ``None`` when the solver finds nothing (Gavel then falls back to the isolated
    allocation).
    """
    m, n = tput.shape
    how = resolve_solver(solver)
    if how == "ecos":
        import cvxpy as cp

        x = cp.Variable((m, n))
        sfa = np.repeat(scale[:, None], n, axis=1)
        fracs = [
            (t[i] + remaining[i] * cp.inv_pos(cp.sum(cp.multiply(tput[i], x[i])))) / denom[i]
            for i in range(m)
        ]
        obj = fracs[0] if m == 1 else cp.maximum(*fracs)
        cons = [x >= 0, cp.sum(cp.multiply(sfa, x), axis=0) <= capacity, cp.sum(x, axis=1) <= 1]
        prob = cp.Problem(cp.Minimize(obj), cons)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prob.solve(solver="ECOS")
        except cp.error.SolverError:
            return None
        if x.value is None:
            return None
        return np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)
    return _rho_bisection(tput, scale, capacity, t, remaining, denom, how)


def _rho_bisection(
    tput: np.ndarray,
    scale: np.ndarray,
    capacity: np.ndarray,
    t: np.ndarray,
    remaining: np.ndarray,
    denom: np.ndarray,
    how: str,
) -> np.ndarray | None:
    """HiGHS path: bisect on ρ; each step asks for ``Σ_j T x >= R / (ρ D − t)`` (an LP)."""
    m, n = tput.shape
    base = _base_matrix(scale, n)
    rate = sp.csr_matrix(
        (tput.ravel(), (np.repeat(np.arange(m), n), np.arange(m * n))), shape=(m, m * n)
    )
    mat = sp.vstack([base, rate]).tocsc()
    hi_rows = np.concatenate([np.ones(m), capacity, np.full(m, INF)])

    def attempt(rho: float, method: Literal["choose", "ipm"] = "choose") -> np.ndarray | None:
        slack = rho * denom - t
        if np.any(slack <= 0):
            return None
        lo_rows = np.concatenate([np.full(m + n, -INF), remaining / slack])
        try:
            sol = solve_lp(
                np.zeros(m * n), mat, lo_rows, hi_rows, np.zeros(m * n), np.full(m * n, INF),
                maximize=False, what="Gavel finish-time fairness LP", method=method,
            )
        except SolverError:
            return None
        return np.clip(sol.reshape(m, n), 0.0, 1.0)

    lo = float(np.max(t / denom))
    hi = max(lo * 2.0, 1.0)
    best = attempt(hi)
    while best is None:
        hi *= 2.0
        if hi > 1e12:
            return None
        best = attempt(hi)
    while hi - lo > 1e-7 * hi:
        mid = 0.5 * (lo + hi)
        if attempt(mid) is None:
            lo = mid
        else:
            hi = mid
    final = attempt(hi, "ipm" if how == "highs-ipm" else "choose")
    return final if final is not None else best
