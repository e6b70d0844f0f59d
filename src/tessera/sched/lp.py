"""A thin, typed door to the HiGHS LP solver for the allocation policies.

Gavel's policies are LPs over a jobs × flavors matrix of time shares ``X``. This module takes a
sparse constraint matrix and bounds, calls HiGHS directly (``highspy``: no modelling-layer
overhead, which matters at thousands of jobs per round), and *raises* when the solve is not
optimal -- Gavel only printed a warning and carried on with whatever it got.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from tessera.errors import TesseraError

INF = float("inf")


class SolverError(TesseraError):
    """The LP solver did not reach an optimal solution."""


_SOLVER: Any = None


def _solver() -> Any:
    """One HiGHS instance per process, created with stdout silenced (HiGHS prints a banner
    on construction, which would corrupt ``--json`` output)."""
    global _SOLVER
    if _SOLVER is None:
        import highspy

        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            _SOLVER = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(devnull)
            os.close(saved)
        _SOLVER.setOptionValue("output_flag", False)
        _SOLVER.setOptionValue("threads", 1)
    else:
        _SOLVER.clearModel()
    return _SOLVER


def solve_lp(
    cost: np.ndarray,
    a: sp.spmatrix | sp.sparray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    maximize: bool,
    what: str = "allocation LP",
    method: Literal["choose", "ipm"] = "choose",
) -> np.ndarray:
    """Solve ``opt cost·x  s.t.  row_lower <= A x <= row_upper, col_lower <= x <= col_upper``.

    ``method="choose"`` lets HiGHS pick (simplex for these LPs: the answer is a *vertex* of the
    optimal face). ``method="ipm"`` runs the interior-point method **without crossover**, which
    stops near the centre of the optimal face -- closer to what an interior-point solver such
    as ECOS (Gavel's default) returns when an LP has many optima (``--compat gavel``).

    Returns:
        The optimal ``x``.

    Raises:
        SolverError: infeasible, unbounded or otherwise not optimal.
    """
    import highspy

    csc = sp.csc_matrix(a)
    h = _solver()
    lp = highspy.HighsLp()
    lp.num_col_ = int(csc.shape[1])
    lp.num_row_ = int(csc.shape[0])
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_ = np.asarray(col_lower, dtype=np.float64)
    lp.col_upper_ = np.asarray(col_upper, dtype=np.float64)
    lp.row_lower_ = np.asarray(row_lower, dtype=np.float64)
    lp.row_upper_ = np.asarray(row_upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
    lp.a_matrix_.index_ = csc.indices.astype(np.int32)
    lp.a_matrix_.value_ = csc.data.astype(np.float64)
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    h.setOptionValue("solver", "ipm" if method == "ipm" else "choose")
    h.setOptionValue("run_crossover", "off" if method == "ipm" else "on")
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"{what}: HiGHS ended with {h.modelStatusToString(status)}")
    return np.asarray(h.getSolution().col_value, dtype=np.float64)
