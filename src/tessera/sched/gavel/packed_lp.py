"""Gavel's packed max-min fairness LP (``MaxMinFairnessPolicyWithPacking``).

Variables ``X[c, t]``: the fraction of time combination ``c`` (a job, or a pair sharing GPUs)
holds ``sf_c`` GPUs of type ``t``. Job ``i``'s normalised rate adds up over every combination
it belongs to: ``Σ_{c ∋ i, t} T_i(c, t) · sf_c / (w_i · P_i) · X[c, t]``, where ``T_i(c, t)`` is
job ``i``'s speed in ``c`` on ``t`` (alone, or its side of the pair's measurement) and ``P_i``
its capacity-weighted mean isolated speed. The LP maximises the smallest normalised rate subject
to: ``X >= 0``; per type, ``Σ_c sf_c X[c, t] <= capacity`` (a pair uses its GPUs once); per job,
``Σ_{c ∋ i, t} X[c, t] <= 1``.

**Gavel's row layout.** Gavel writes the per-job sums by concatenating each job's list of
combinations (``relevant_combinations``) and reshaping the concatenation into one row per job.
When every job has the same number of combinations (every active job has the same gang size,
Gavel's packing experiments) the rows are exactly the jobs. With mixed gang sizes the rows are
equal-length *chunks* of the concatenation that straddle jobs, and when the length does not
divide Gavel crashes (cvxpy refuses the reshape). :func:`job_rows` reproduces the chunks when
they exist (``gavel_form``), and otherwise uses the true per-job rows and says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tessera.model.jobs import JobId
from tessera.sched.core.lp import INF, LpModel
from tessera.sched.gavel.packed import Combo
from tessera.sched.gavel.solver import Backend


@dataclass(frozen=True, slots=True)
class PackedProblem:
    """One recompute's packed allocation problem (Gavel's sorted orders).

    Attributes:
        jobs: single jobs, ascending id.
        combos: every combination, Gavel-sorted (jobs first, then pairs).
        members: for each job, the combination indexes it belongs to, ascending.
        member_speed: for each job, ``len(members[i]) × types``: its steps/s in each of its
            combinations on each type (alone, or its side of a pair's measurement).
        scale: each combination's gang size.
        weight: each job's priority weight.
        isolated: ``jobs × types`` isolated speeds.
        capacity: GPUs per type.
    """

    jobs: tuple[JobId, ...]
    combos: tuple[Combo, ...]
    members: tuple[tuple[int, ...], ...]
    member_speed: tuple[np.ndarray, ...]
    scale: np.ndarray
    weight: np.ndarray
    isolated: np.ndarray
    capacity: np.ndarray


def job_rows(members: Sequence[Sequence[int]], n_types: int, gavel_form: bool
             ) -> tuple[list[list[tuple[int, int, int]]], bool]:
    """Rows of the per-job sums as lists of ``(job, combo, type)`` terms.

    Returns ``(rows, chunked)``: Gavel's equal chunks of the concatenation when
    ``gavel_form`` and the length divides; else one row per job (``chunked`` False).
    """
    flat = [(i, c, t) for i, cs in enumerate(members) for c in cs for t in range(n_types)]
    n = len(members)
    if gavel_form and n and len(flat) % n == 0:
        w = len(flat) // n
        return [flat[r * w:(r + 1) * w] for r in range(n)], True
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    for term in flat:
        rows[term[0]].append(term)
    return rows, False


def packed_max_min(
    p: PackedProblem, backend: Backend, gavel_form: bool = True
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Solve the packed max-min LP; returns ``(X over combos × types, fallbacks)``."""
    n_t = len(p.capacity)
    m_c = len(p.combos)
    if not p.jobs:
        return np.zeros((m_c, n_t)), ()
    # Gavel's ProportionalPolicy, operation for operation: capacity / jobs per type, rows
    # scaled by the largest row sum, then the row-wise sum of throughput × share.
    n_j = len(p.jobs)
    x_prop = np.array([[c / n_j for c in p.capacity] for _ in range(n_j)])
    x_prop = x_prop / np.sum(x_prop, axis=1).max()
    prop = np.sum(np.multiply(p.isolated, x_prop), axis=1)
    prop = np.where(prop > 0, prop, np.inf)
    rows, chunked = job_rows(p.members, n_t, gavel_form)
    fallbacks: tuple[str, ...] = ()
    if gavel_form and not chunked and len({len(m) for m in p.members}) > 1:
        fallbacks = ("Gavel packed max-min fairness: mixed gang sizes make Gavel's row reshape "
                     "impossible (Gavel crashes here); solved with one row per job instead",)
    coef: list[list[tuple[int, int, float]]] = []
    for row in rows:
        terms = []
        for i, c, t in row:
            k = p.members[i].index(c)
            v = p.member_speed[i][k, t] * p.scale[c] / (p.weight[i] * prop[i])
            terms.append((c, t, float(v)))
        coef.append(terms)
    if backend.method == "ecos":
        x = _ecos(p, coef, rows, chunked)
        if x is not None:
            return x, fallbacks
        fallbacks += ("Gavel packed max-min fairness LP: ECOS returned no solution; "
                      "solved with HiGHS IPM instead",)
    return _highs(p, coef, rows, backend), fallbacks


def _ecos(p: PackedProblem, coef: list[list[tuple[int, int, float]]],
          rows: list[list[tuple[int, int, int]]], chunked: bool) -> np.ndarray | None:
    """Gavel's cvxpy form (index the member variables, reshape into rows), solved by ECOS;
    with per-job rows (Gavel's reshape impossible) each row is posed on its own."""
    import cvxpy as cp  # lazy: optional gavel-compat extra, +1.2 s

    m_c, n_t = len(p.combos), len(p.capacity)
    n_j = len(p.jobs)
    x = cp.Variable((m_c, n_t))
    idx = [c for cs in p.members for c in cs]
    # The rows are consecutive runs of Gavel's flat (job, combination, type) order, so the
    # coefficients read in row order are the (combination index, type) matrix row-major.
    tput = np.array([v for r in coef for _c, _t, v in r]).reshape(len(idx), n_t)
    sfa = np.repeat(p.scale[:, None], n_t, axis=1)
    cons = [x >= 0, cp.sum(cp.multiply(sfa, x), axis=0) <= p.capacity]
    if chunked:
        realized = cp.multiply(sp.csc_matrix(tput), x[idx])
        width = len(idx) * n_t // n_j
        objective = cp.Maximize(cp.min(cp.sum(cp.reshape(realized, (n_j, width), order="C"),
                                              axis=1)))
        cons.append(cp.sum(cp.reshape(x[idx], (n_j, width), order="C"), axis=1) <= 1)
    else:
        cons += [cp.sum(cp.hstack([x[c, t] for _i, c, t in r])) <= 1 for r in rows]
        objective = cp.Maximize(cp.min(cp.hstack(
            [cp.sum(cp.hstack([v * x[c, t] for c, t, v in r])) for r in coef])))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cp.Problem(objective, cons).solve(solver="ECOS")
    except cp.error.SolverError:
        return None
    if x.value is None:
        return None
    return np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)


def _highs(p: PackedProblem, coef: list[list[tuple[int, int, float]]],
           rows: list[list[tuple[int, int, int]]], backend: Backend) -> np.ndarray:
    """The same LP on HiGHS (variables ``X`` row-major, then the minimum ``z``)."""
    m_c, n_t = len(p.combos), len(p.capacity)
    n = m_c * n_t
    r_idx: list[int] = []
    c_idx: list[int] = []
    vals: list[float] = []
    upper: list[float] = []
    row = 0
    for t in range(n_t):  # capacity
        for c in range(m_c):
            r_idx.append(row)
            c_idx.append(c * n_t + t)
            vals.append(float(p.scale[c]))
        upper.append(float(p.capacity[t]))
        row += 1
    for r in rows:  # each job's shares sum to at most 1
        for _i, c, t in r:
            r_idx.append(row)
            c_idx.append(c * n_t + t)
            vals.append(1.0)
        upper.append(1.0)
        row += 1
    for terms in coef:  # z - Σ coef · X <= 0
        for c, t, v in terms:
            r_idx.append(row)
            c_idx.append(c * n_t + t)
            vals.append(-v)
        r_idx.append(row)
        c_idx.append(n)
        vals.append(1.0)
        upper.append(0.0)
        row += 1
    mat = sp.csc_matrix((vals, (r_idx, c_idx)), shape=(row, n + 1))
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    sol = backend.lp.solve(
        LpModel(cost, mat, np.full(row, -INF), np.array(upper), np.zeros(n + 1),
                np.concatenate([np.full(n, INF), [INF]]), maximize=True),
        what="Gavel packed max-min fairness LP", method=backend.lp_method,
    )
    return np.clip(np.asarray(sol[:n]).reshape(m_c, n_t), 0.0, 1.0)
