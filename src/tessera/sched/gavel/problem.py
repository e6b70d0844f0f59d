"""The allocation problem: a jobs × flavors matrix of time shares, and the constraints every
Gavel policy shares.

Gavel turns scheduling into linear algebra. Think of a round-robin timetable: ``X[m, j]`` is the
fraction of wall-clock time job ``m`` should spend on GPUs of flavor ``j``. A job is in at most
one place at a time, and on average no flavor may be asked for more GPUs than it has:

* ``Σ_j X[m, j] <= 1``            (one row per job)
* ``Σ_m sf_m · X[m, j] <= cap_j`` (one row per flavor; ``sf_m`` is the job's gang size)
* ``X >= 0``

Those are the **base constraints**; each policy adds its own objective (max-min fairness,
finish-time fairness, makespan). :func:`base_constraints` builds them once for everyone.

**Which pairs are variables.** Tessera makes a column only where a job can run (throughput
> 0), so a 2,048-job, 3-flavor problem has at most ~6,000 columns. Gavel makes one for every
pair, zero throughputs included, and bounds ``X`` only through the rows; ``--compat gavel``
reproduces that exactly (:meth:`Variables.every_pair`, ``x_upper = inf``), because the solver's
answer on a degenerate LP depends on the formulation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId


@dataclass(frozen=True, slots=True)
class ShareProblem:
    """One round's allocation problem, as dense arrays.

    Attributes:
        jobs: the jobs (row order).
        flavors: flavor short names (column order).
        tput: ``T[m, j]``, steps/s of the whole gang (0 where the job cannot run).
        scale: gang sizes ``sf_m``.
        weight: priority weights ``w_m``.
        capacity: GPUs of each flavor on nodes that are up.
    """

    jobs: tuple[JobId, ...]
    flavors: tuple[GpuFlavor, ...]
    tput: np.ndarray
    scale: np.ndarray
    weight: np.ndarray
    capacity: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.jobs), len(self.flavors))

    def take(self, rows: np.ndarray, scale: np.ndarray | None = None) -> ShareProblem:
        """The sub-problem of ``rows`` (optionally with other gang sizes)."""
        return ShareProblem(
            jobs=tuple(self.jobs[i] for i in rows),
            flavors=self.flavors,
            tput=self.tput[rows],
            scale=self.scale[rows] if scale is None else scale,
            weight=self.weight[rows],
            capacity=self.capacity,
        )


@dataclass(frozen=True, slots=True)
class JobClasses:
    """Jobs whose LP rows are identical, merged into one *class* per distinct row.

    Identical jobs are interchangeable in an allocation LP, so the max-min and max-sum LPs
    solve one row per class with the class's gang sizes summed (a class of ``k`` jobs of
    ``sf`` GPUs needs ``k·sf`` GPUs at share 1) and give every job its class's share: the
    same optimum value, an even split among identical jobs, and far fewer rows when many
    jobs look alike.

    Attributes:
        first: for each class, its first job's row.
        inverse: for each job, its class.
        counts: jobs per class.
    """

    first: np.ndarray
    inverse: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, key: np.ndarray) -> JobClasses:
        """The classes of the rows of ``key`` (one row per job; equal rows, one class)."""
        classes, inverse, counts = np.unique(key, axis=0, return_inverse=True,
                                             return_counts=True)
        inverse = inverse.reshape(-1)
        first = np.zeros(len(classes), dtype=int)
        first[inverse[::-1]] = np.arange(len(inverse))[::-1]
        return cls(first, inverse, counts)

    def reduce(self, p: ShareProblem) -> ShareProblem:
        """One row per class: its first job's, with the class's gang sizes summed."""
        return p.take(self.first, scale=p.scale[self.first] * self.counts)


@dataclass(frozen=True, slots=True)
class Variables:
    """The LP's columns: which ``(job, flavor)`` pairs carry a share, in column order.

    Attributes:
        rows: the job (row of ``X``) of each column.
        cols: the flavor (column of ``X``) of each column.
        shape: ``X``'s shape.
        x_upper: upper bound on every column (1 for Tessera; Gavel leaves it to the rows).
    """

    rows: np.ndarray
    cols: np.ndarray
    shape: tuple[int, int]
    x_upper: float = 1.0

    @classmethod
    def runnable(cls, p: ShareProblem) -> Variables:
        """One column per pair where the job can run (Tessera)."""
        rows, cols = np.nonzero(p.tput > 0)
        return cls(rows, cols, p.shape)

    @classmethod
    def every_pair(cls, p: ShareProblem) -> Variables:
        """One column per pair, row-major, unbounded above (Gavel's ``cp.Variable((m, n))``)."""
        m, n = p.shape
        idx = np.arange(m * n)
        return cls(idx // n, idx % n, p.shape, float("inf"))

    def __len__(self) -> int:
        return len(self.rows)

    def jobs_with_columns(self) -> np.ndarray:
        """Sorted rows of ``X`` that have at least one column."""
        has = np.zeros(self.shape[0], dtype=bool)
        has[self.rows] = True
        return np.flatnonzero(has)

    def per_job(self, coef: np.ndarray, jobs: np.ndarray) -> sp.csr_matrix:
        """Rows ``Σ_j coef[m, j] X[m, j]`` for each ``m`` in ``jobs`` (sorted), over the columns."""
        pos = -np.ones(self.shape[0], dtype=int)
        pos[jobs] = np.arange(len(jobs))
        keep = pos[self.rows] >= 0
        n = len(self.rows)
        return sp.csr_matrix(
            (coef[self.rows, self.cols][keep], (pos[self.rows][keep], np.arange(n)[keep])),
            shape=(len(jobs), n),
        )

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """Dense ``X`` from column values, clipped to ``[0, 1]`` (as Gavel does)."""
        x = np.zeros(self.shape)
        x[self.rows, self.cols] = np.clip(values[: len(self.rows)], 0.0, 1.0)
        return x


def base_constraints(p: ShareProblem, v: Variables) -> tuple[sp.csr_matrix, np.ndarray]:
    """The base constraints over the columns ``v``: one row per job, then one per flavor.

    Returns:
        ``(A, upper)`` meaning ``A · x <= upper`` (every lower bound is ``-inf``).
    """
    m, j = p.shape
    n = len(v)
    var = np.arange(n)
    job_rows = sp.csr_matrix((np.ones(n), (v.rows, var)), shape=(m, n))
    cap_rows = sp.csr_matrix((p.scale[v.rows], (v.cols, var)), shape=(j, n))
    return sp.vstack([job_rows, cap_rows]).tocsr(), np.concatenate([np.ones(m), p.capacity])
