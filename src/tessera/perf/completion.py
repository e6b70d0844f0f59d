"""Low-rank matrix completion of a throughput table in log space.

A throughput table is a matrix: one row per job type, one column per GPU flavor, some cells
missing (never measured, or the job did not fit in memory). Gavel estimates a new job's row by
profiling a fraction of its cells and completing the matrix from reference job types with
probabilistic matrix factorisation, then matching the job to its nearest reference type
(``scheduler/throughput_estimator.py``). Tessera completes the matrix the same way but in
**log space** and keeps the completed row itself:

    log y[j, f] = a[j] + c[f] + u[j] . v[f]

* ``a[j]`` is the job's *scale* (how many steps per second it makes anywhere): one observation
  fixes it;
* ``c[f]`` is the flavor's *speed* (how much faster it is for the typical job);
* ``u[j] . v[f]`` (rank ``r``) is the *shape*: which jobs gain more than the typical one from
  which flavor (compute- against memory-bound work, say). It needs two observations or more.

Working in logs makes a speed-up a difference, so a factor of two counts the same on a K80 and
on an A100, and the fit cannot predict a negative rate.

:func:`complete` fits the reference table by alternating ridge least squares (every row's
``(a, u)`` given the columns, then every column's ``(c, v)`` given the rows, each a batch of
small linear solves). :func:`fit_rows` then fits many *new* rows against the fixed columns at
once: the scheduler's per-round update.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: Rank and ridge penalty chosen by ``tessera speeds`` (leave-one-job-type-out on both
#: bundled tables): rank 1 beats rank 0 (biases only) with two observations and more, rank 2
#: overfits the 3- and 5-flavor tables.
DEFAULT_RANK = 1
DEFAULT_REG = 0.1


@dataclass(frozen=True, slots=True)
class Completion:
    """A fitted log-space factorisation of a reference table.

    Attributes:
        row_bias: ``a``, shape ``(rows,)``.
        col_bias: ``c``, shape ``(cols,)``; the mean of ``row_bias`` is folded into it, so a
            job with no observation is predicted at ``exp(col_bias)``.
        row_factors: ``u``, shape ``(rows, rank)``.
        col_factors: ``v``, shape ``(cols, rank)``.
        reg: the ridge penalty the fit used (also used for new rows).
    """

    row_bias: FloatArray
    col_bias: FloatArray
    row_factors: FloatArray
    col_factors: FloatArray
    reg: float

    @property
    def rank(self) -> int:
        return int(self.col_factors.shape[1])

    def predict_log(self) -> FloatArray:
        """The completed reference table, in logs, shape ``(rows, cols)``."""
        return (self.row_bias[:, None] + self.col_bias[None, :]
                + self.row_factors @ self.col_factors.T)


def _ridge_batch(design: FloatArray, weights: BoolArray, target: FloatArray,
                 penalty: FloatArray) -> FloatArray:
    """Solve ``min |W (X w - y)|^2 + w' P w`` for a batch of problems sharing the design.

    ``design`` is ``(m, p)``, ``weights`` and ``target`` are ``(n, m)``, ``penalty`` ``(p,)``;
    the result is ``(n, p)``.
    """
    w = weights.astype(np.float64)
    gram = np.einsum("nm,mp,mq->npq", w, design, design) + np.diag(penalty)[None, :, :]
    rhs = np.einsum("nm,mp,nm->np", w, design, np.where(weights, target, 0.0))
    solved: FloatArray = np.linalg.solve(gram, rhs[:, :, None])[:, :, 0]
    return solved


def complete(log_values: FloatArray, rank: int = DEFAULT_RANK, reg: float = DEFAULT_REG,
             iterations: int = 60, seed: int = 0) -> Completion:
    """Fit ``log_values`` (NaN where missing) by alternating ridge least squares.

    Args:
        log_values: ``(rows, cols)`` natural logs of throughputs; NaN marks a missing cell.
        rank: the shape's rank ``r`` (0: biases only).
        reg: ridge penalty on the factors (the biases are penalised 1000 times less).
        iterations: alternations; the fit is deterministic for a given ``seed``.

    Raises:
        ValueError: a row or a column has no value at all, or ``rank`` is negative.
    """
    values = np.asarray(log_values, dtype=np.float64)
    mask = ~np.isnan(values)
    if rank < 0:
        raise ValueError(f"rank must be >= 0, not {rank}")
    if values.ndim != 2 or not mask.any(axis=1).all() or not mask.any(axis=0).all():
        raise ValueError("every row and every column of the table needs one value at least")
    rows, cols = values.shape
    rng = np.random.default_rng(seed)
    u = rng.normal(0.0, 0.1, (rows, rank))
    v = rng.normal(0.0, 0.1, (cols, rank))
    a = np.zeros(rows)
    c = np.nanmean(values, axis=0)
    penalty = np.array([reg * 1e-3] + [reg] * rank)
    for _ in range(iterations):
        # rows: target log y - c[f], design [1, v[f]]
        sol = _ridge_batch(np.hstack([np.ones((cols, 1)), v]), mask,
                           values - c[None, :], penalty)
        a, u = sol[:, 0], sol[:, 1:]
        # columns: target log y - a[j], design [1, u[j]]
        sol = _ridge_batch(np.hstack([np.ones((rows, 1)), u]), mask.T,
                           (values - a[:, None]).T, penalty)
        c, v = sol[:, 0], sol[:, 1:]
    shift = float(a.mean())
    return Completion(a - shift, c + shift, u, v, reg)


def fit_rows(col_bias: FloatArray, col_factors: FloatArray, log_obs: FloatArray,
             observed: BoolArray, reg: float = DEFAULT_REG) -> FloatArray:
    """Predicted log rows for many new jobs from their observations, against fixed columns.

    A job with no observation gets the prior ``col_bias``; with one, its scale ``a`` only (the
    observed log-ratio to the prior shifts the whole row, so the observed cell is reproduced
    exactly); with two or more, its scale and shape ``u`` by ridge regression (``u`` shrunk
    towards the typical job's zero).

    Args:
        col_bias: ``(cols,)``; col_factors: ``(cols, rank)``.
        log_obs: ``(jobs, cols)`` observed log throughputs (any value where not observed).
        observed: ``(jobs, cols)`` which cells were observed.

    Returns:
        ``(jobs, cols)`` log throughputs.
    """
    count = observed.sum(axis=1)
    resid = np.where(observed, log_obs - col_bias[None, :], 0.0)
    scale = np.divide(resid.sum(axis=1), count, out=np.zeros(len(count)), where=count > 0)
    out = col_bias[None, :] + scale[:, None]
    several = count >= 2
    if col_factors.shape[1] and several.any():
        design = np.hstack([np.ones((col_bias.shape[0], 1)), col_factors])
        penalty = np.array([reg * 1e-3] + [reg] * col_factors.shape[1])
        sol = _ridge_batch(design, observed[several], log_obs[several] - col_bias[None, :],
                           penalty)
        out[several] = col_bias[None, :] + sol @ design.T
    return out
