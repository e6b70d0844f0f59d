"""The jobs × flavors matrix that allocation policies optimise over (Gavel's formulation).

``X[m, j]`` is the fraction of wall-clock time job ``m`` should spend on flavor ``j``.
Only pairs where the job can run (throughput > 0) become LP variables, so the matrix stays
sparse. The base constraints every allocation LP shares:

* ``Σ_j X[m, j] <= 1`` -- a job is in at most one place at a time;
* ``Σ_m sf_m · X[m, j] <= GPUs_j`` -- no flavor is over-subscribed on average;
* ``X >= 0``.

:func:`share_lp` solves ``max z`` subject to the base constraints plus
``z <= a_m · X[m, :]`` for every job -- the common shape of max-min fairness (``a`` = weighted,
normalised throughput) and, with ``a = T / R``, of makespan minimisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tessera.model.jobs import JobId
from tessera.sched.lp import INF, solve_lp
from tessera.sched.policy import PolicyContext
from tessera.sched.snapshot import JobView


@dataclass(frozen=True, slots=True)
class AllocationProblem:
    """Dense views of one round's allocation problem.

    Attributes:
        jobs: the active jobs (row order).
        flavors: flavor short names (column order).
        tput: ``T[m, j]`` policy-visible steps/s (0 where the job cannot run).
        scale: gang sizes ``sf_m``.
        weight: priority weights ``w_m``.
        capacity: GPUs of each flavor on nodes that are up.
    """

    jobs: tuple[JobView, ...]
    flavors: tuple[str, ...]
    tput: np.ndarray
    scale: np.ndarray
    weight: np.ndarray
    capacity: np.ndarray

    @property
    def job_ids(self) -> tuple[JobId, ...]:
        return tuple(j.job_id for j in self.jobs)

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Row and column indices of the LP variables (pairs with T > 0)."""
        rows, cols = np.nonzero(self.tput > 0)
        return rows, cols


def build_problem(ctx: PolicyContext, jobs: Sequence[JobView] | None = None) -> AllocationProblem:
    """Assemble the matrix for ``jobs`` (default: every active job of the snapshot)."""
    js = tuple(ctx.snapshot.jobs if jobs is None else jobs)
    cap: dict[str, int] = {}
    for n in ctx.snapshot.up_nodes():
        cap[n.flavor.short] = cap.get(n.flavor.short, 0) + n.gpus
    flavors = tuple(cap)
    col = {f: i for i, f in enumerate(flavors)}
    tput = np.zeros((len(js), len(flavors)))
    for m, j in enumerate(js):
        for r in ctx.oracle.rates(j.spec):
            if r.flavor in col:
                tput[m, col[r.flavor]] = r.consolidated
    return AllocationProblem(
        jobs=js,
        flavors=flavors,
        tput=tput,
        scale=np.array([j.spec.num_gpus for j in js], dtype=float),
        weight=np.array([j.spec.priority_weight for j in js], dtype=float),
        capacity=np.array([cap[f] for f in flavors], dtype=float),
    )


def _base_rows(p: AllocationProblem, rows: np.ndarray, cols: np.ndarray) -> sp.csr_matrix:
    """Base constraint matrix over the pair variables: M job rows then J flavor rows."""
    n = len(rows)
    m_count, j_count = p.tput.shape
    var = np.arange(n)
    job_part = sp.csr_matrix((np.ones(n), (rows, var)), shape=(m_count, n))
    cap_part = sp.csr_matrix((p.scale[rows], (cols, var)), shape=(j_count, n))
    return sp.vstack([job_part, cap_part]).tocsr()


def share_lp(p: AllocationProblem, a: np.ndarray, what: str) -> tuple[np.ndarray, float]:
    """Solve ``max z`` s.t. base constraints and ``z <= Σ_j a[m, j] X[m, j]`` for every job.

    Jobs with no runnable flavor are left out of the ``z`` rows (their share stays 0).

    **Symmetry reduction.** Jobs with identical rows (same ``a``, same usable flavors, same
    gang size) are interchangeable: averaging any optimal solution over permutations of such
    jobs keeps it feasible and optimal (the problem is convex and symmetric), so some optimal
    solution gives them equal shares. We therefore solve one LP row per *class* of identical
    jobs, with the class size multiplying its capacity use. A trace drawn from 26 job types ×
    4 gang sizes has at most ~100 classes however many jobs are active, which is what keeps a
    2,048-job round in milliseconds. The equal split is also the solution an interior-point
    solver (Gavel's ECOS) returns, rather than an arbitrary simplex vertex.

    Returns:
        ``(X, z)`` with ``X`` dense ``M × J``.
    """
    m_count, j_count = p.tput.shape
    if m_count == 0:
        return np.zeros((0, j_count)), 0.0
    usable = (p.tput > 0).astype(float)
    key = np.hstack([a * usable, usable, p.scale[:, None]])
    classes, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    first = np.zeros(len(classes), dtype=int)
    first[inverse[::-1]] = np.arange(m_count)[::-1]
    reduced = AllocationProblem(
        jobs=tuple(p.jobs[i] for i in first),
        flavors=p.flavors,
        tput=p.tput[first],
        scale=p.scale[first] * counts,
        weight=p.weight[first],
        capacity=p.capacity,
    )
    x_c, z = _share_lp_rows(reduced, a[first], what)
    return x_c[inverse], z


def _share_lp_rows(p: AllocationProblem, a: np.ndarray, what: str) -> tuple[np.ndarray, float]:
    """``share_lp`` without the symmetry reduction (one LP row per row of ``p``)."""
    rows, cols = p.pairs()
    m_count, j_count = p.tput.shape
    x = np.zeros((m_count, j_count))
    if len(rows) == 0:
        return x, 0.0
    n = len(rows)
    base = _base_rows(p, rows, cols)
    has_var = np.zeros(m_count, dtype=bool)
    has_var[rows] = True
    live = np.flatnonzero(has_var)
    live_pos = -np.ones(m_count, dtype=int)
    live_pos[live] = np.arange(len(live))
    # z - a_m · X_m <= 0  for live jobs
    fair = sp.csr_matrix(
        (-a[rows, cols], (live_pos[rows], np.arange(n))), shape=(len(live), n)
    )
    z_col = sp.vstack(
        [sp.csr_matrix((base.shape[0], 1)), sp.csr_matrix(np.ones((len(live), 1)))]
    )
    mat = sp.hstack([sp.vstack([base, fair]), z_col]).tocsc()
    row_lo = np.full(mat.shape[0], -INF)
    row_hi = np.concatenate([np.ones(m_count), p.capacity, np.zeros(len(live))])
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    col_lo = np.zeros(n + 1)
    col_hi = np.concatenate([np.ones(n), [INF]])
    sol = solve_lp(cost, mat, row_lo, row_hi, col_lo, col_hi, maximize=True, what=what)
    x[rows, cols] = np.clip(sol[:n], 0.0, 1.0)
    return x, float(sol[-1])


def linear_lp(p: AllocationProblem, value: np.ndarray, what: str) -> np.ndarray:
    """Solve ``max Σ value[m, j] X[m, j]`` under the base constraints; returns dense ``X``."""
    rows, cols = p.pairs()
    x = np.zeros(p.tput.shape)
    if len(rows) == 0:
        return x
    n = len(rows)
    base = _base_rows(p, rows, cols)
    row_hi = np.concatenate([np.ones(p.tput.shape[0]), p.capacity])
    sol = solve_lp(
        value[rows, cols], base, np.full(base.shape[0], -INF), row_hi,
        np.zeros(n), np.ones(n), maximize=True, what=what,
    )
    x[rows, cols] = np.clip(sol, 0.0, 1.0)
    return x


def feasible_rates(p: AllocationProblem, need: np.ndarray, what: str) -> np.ndarray | None:
    """Find ``X`` meeting ``Σ_j T[m, j] X[m, j] >= need[m]`` under the base constraints.

    Returns ``None`` when no such ``X`` exists (used by finish-time fairness' bisection).
    """
    from tessera.sched.lp import SolverError

    rows, cols = p.pairs()
    n = len(rows)
    m_count = p.tput.shape[0]
    base = _base_rows(p, rows, cols)
    rate = sp.csr_matrix((p.tput[rows, cols], (rows, np.arange(n))), shape=(m_count, n))
    mat = sp.vstack([base, rate]).tocsc()
    row_lo = np.concatenate([np.full(base.shape[0], -INF), need])
    row_hi = np.concatenate([np.ones(m_count), p.capacity, np.full(m_count, INF)])
    try:
        sol = solve_lp(
            np.zeros(n), mat, row_lo, row_hi, np.zeros(n), np.ones(n), maximize=False, what=what
        )
    except SolverError:
        return None
    x = np.zeros(p.tput.shape)
    x[rows, cols] = np.clip(sol, 0.0, 1.0)
    return x
