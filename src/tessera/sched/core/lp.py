"""A thin, typed door to the HiGHS LP solver for the allocation policies.

Gavel's policies are LPs over a jobs × flavors matrix of time shares ``X``. This module takes a
sparse constraint matrix and bounds and calls HiGHS directly (``highspy``: no modelling-layer
overhead, which matters at thousands of jobs per round).

:class:`LpSolver` *owns* one HiGHS instance. There is no process-wide solver: the driver keeps
one in its decision context and passes it down (``PolicyContext.solver``), so two simulations
in one process never share solver state, and a policy that solves a sequence of related LPs
(finish-time fairness' ρ search) can keep the model loaded and *warm-start* each solve from the
previous basis (:meth:`LpSolver.load` + :meth:`LpSolver.set_row_lower` + :meth:`LpSolver.run`).

:meth:`LpSolver.solve` *raises* when a solve is not optimal -- Gavel only printed a warning and
carried on with whatever it got.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from tessera.errors import TesseraError

INF = float("inf")

#: ``choose``: HiGHS picks (simplex for these LPs: the answer is a *vertex* of the optimal face).
#: ``ipm``: interior point **without crossover**, which stops near the centre of the optimal
#: face -- closer to what an interior-point solver such as ECOS (Gavel's default) returns.
LpMethod = Literal["choose", "ipm"]


class SolverError(TesseraError):
    """The LP solver did not reach an optimal solution."""


@dataclass(frozen=True, slots=True)
class LpModel:
    """``opt cost·x  s.t.  row_lower <= A x <= row_upper,  col_lower <= x <= col_upper``.

    ``integer`` marks the columns that must take whole values (a mixed-integer programme,
    solved by HiGHS' branch and bound); ``None``: none do (an LP).
    """

    cost: np.ndarray
    a: sp.spmatrix | sp.sparray
    row_lower: np.ndarray
    row_upper: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    maximize: bool
    integer: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class LpOutcome:
    """How one solve ended.

    Attributes:
        status: ``optimal``, ``infeasible`` or HiGHS' own words for anything else
            (``Time limit reached``, ``Unknown`` ...).
        x: the column values when ``status == "optimal"``, else ``None``.
    """

    status: str
    x: np.ndarray | None

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"


def _quiet_highs() -> Any:
    """A HiGHS instance created with stdout silenced (HiGHS prints a banner on construction,
    which would corrupt ``--json`` output)."""
    import highspy  # lazy: +16 ms at every `tessera` start

    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(devnull)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    return h


class LpSolver:
    """One HiGHS instance, created on first use and reused for every solve given to it.

    Not thread-safe; one per decision context. Each :meth:`solve` starts from a cleared model
    (results do not depend on what was solved before); :meth:`load` / :meth:`run` keep the
    model and its basis between solves for warm starts.
    """

    def __init__(self) -> None:
        self._h: Any = None
        self._dual_strategy = 1
        #: Counts :meth:`load` calls: a caller that warm-starts checks it still owns the model.
        self.loads = 0

    def _highs(self) -> Any:
        if self._h is None:
            self._h = _quiet_highs()
            self._dual_strategy = int(self._h.getOptionValue("simplex_strategy")[1])
        return self._h

    def solve(self, model: LpModel, what: str = "allocation LP",
              method: LpMethod = "choose") -> np.ndarray:
        """Solve ``model`` from scratch.

        Returns:
            The optimal ``x``.

        Raises:
            SolverError: infeasible, unbounded or otherwise not optimal.
        """
        out = self.attempt(model, method)
        if out.x is None:
            raise SolverError(f"{what}: HiGHS ended with {out.status}")
        return out.x

    def attempt(self, model: LpModel, method: LpMethod = "choose") -> LpOutcome:
        """Like :meth:`solve` but reports a non-optimal end instead of raising."""
        self.load(model, method)
        return self.run()

    def load(self, model: LpModel, method: LpMethod = "choose") -> None:
        """Replace the solver's model (and forget any basis) without solving it."""
        import highspy  # lazy: +16 ms at every `tessera` start

        csc = sp.csc_matrix(model.a)
        h = self._highs()
        h.clearModel()
        lp = highspy.HighsLp()
        lp.num_col_ = int(csc.shape[1])
        lp.num_row_ = int(csc.shape[0])
        lp.col_cost_ = np.asarray(model.cost, dtype=np.float64)
        lp.col_lower_ = np.asarray(model.col_lower, dtype=np.float64)
        lp.col_upper_ = np.asarray(model.col_upper, dtype=np.float64)
        lp.row_lower_ = np.asarray(model.row_lower, dtype=np.float64)
        lp.row_upper_ = np.asarray(model.row_upper, dtype=np.float64)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
        lp.a_matrix_.index_ = csc.indices.astype(np.int32)
        lp.a_matrix_.value_ = csc.data.astype(np.float64)
        lp.sense_ = (highspy.ObjSense.kMaximize if model.maximize
                     else highspy.ObjSense.kMinimize)
        if model.integer is not None:
            kinds = highspy.HighsVarType
            lp.integrality_ = [kinds.kInteger if b else kinds.kContinuous
                               for b in np.asarray(model.integer, dtype=bool)]
        h.setOptionValue("solver", "ipm" if method == "ipm" else "choose")
        # Small integer programmes (the slot programme: a few hundred columns, solved every
        # round) spend more time in presolve and primal heuristics than in branching: without
        # them HiGHS reaches the same optimum ~40 % sooner on the programmes of a Gavel-like
        # trace. LPs keep HiGHS' own choice.
        h.setOptionValue("presolve", "off" if model.integer is not None else "choose")
        h.setOptionValue("mip_heuristic_effort", 0.0)
        h.setOptionValue("run_crossover", "off" if method == "ipm" else "on")
        h.setOptionValue("simplex_strategy", self._dual_strategy)
        h.passModel(lp)
        self.loads += 1

    def start_from(self, basic_cols: np.ndarray, tight_rows: np.ndarray) -> None:
        """Give the loaded model a starting basis and solve it with the *primal* simplex.

        ``basic_cols`` are the columns in the basis (the others sit at their lower bound);
        ``tight_rows`` are rows held at their lower bound (the others are basic). A good guess
        (say, each job on one flavor, exactly meeting its need) leaves primal simplex a few
        hundred pivots instead of one per row. Later :meth:`run` calls keep the basis; call
        :meth:`use_dual` to go back to the dual simplex for bound changes.
        """
        import highspy  # lazy: +16 ms at every `tessera` start

        h = self._highs()
        status = highspy.HighsBasisStatus
        basis = highspy.HighsBasis()
        basis.col_status = [status.kBasic if b else status.kLower for b in basic_cols]
        basis.row_status = [status.kLower if t else status.kBasic for t in tight_rows]
        basis.valid = True
        h.setBasis(basis)
        h.setOptionValue("simplex_strategy", 4)  # primal

    def basis(self) -> Any:
        """The loaded model's current basis (opaque), for :meth:`restore_basis` after the
        same model is loaded again (say, once a side problem has been solved in between)."""
        return self._highs().getBasis()

    def restore_basis(self, basis: Any) -> None:
        """Start the next :meth:`run` of the loaded model from ``basis`` (from :meth:`basis`
        on a model with the same rows and columns; bounds and costs may differ)."""
        self._highs().setBasis(basis)

    def use_dual(self) -> None:
        """Back to HiGHS' default (dual) simplex, keeping the model and its basis."""
        self._highs().setOptionValue("simplex_strategy", self._dual_strategy)

    def set_row_lower(self, rows: np.ndarray, lower: np.ndarray) -> None:
        """Change the lower bounds of ``rows`` of the loaded model (upper bounds become +inf);
        the next :meth:`run` starts from the current basis."""
        n = len(rows)
        self._highs().changeRowsBounds(
            n, np.asarray(rows, dtype=np.int32), np.asarray(lower, dtype=np.float64),
            np.full(n, INF),
        )

    def set_objective(self, cost: np.ndarray, maximize: bool) -> None:
        """Replace the loaded model's objective; the next :meth:`run` starts from the current
        basis (still primal feasible: only the costs changed)."""
        import highspy  # lazy: +16 ms at every `tessera` start

        h = self._highs()
        n = len(cost)
        h.changeColsCost(n, np.arange(n, dtype=np.int32), np.asarray(cost, dtype=np.float64))
        h.changeObjectiveSense(highspy.ObjSense.kMaximize if maximize
                               else highspy.ObjSense.kMinimize)

    def set_hessian(self, q: sp.spmatrix | sp.sparray, iteration_limit: int) -> None:
        """Make the loaded (minimised) model a convex QP: add ``½ xᵀ Q x`` to its objective.
        ``q`` is ``Q``'s lower triangle (``Q`` symmetric positive semi-definite, one row and
        column per column of the model); HiGHS' QP solver then runs, for at most
        ``iteration_limit`` iterations (its active-set method can stall on degenerate
        problems: past the limit :meth:`run` reports a non-optimal status, deterministically)."""
        import highspy  # lazy: +16 ms at every `tessera` start

        self._highs().setOptionValue("qp_iteration_limit", int(iteration_limit))
        low = sp.csc_matrix(sp.tril(q))
        low.eliminate_zeros()
        low.sort_indices()
        self._highs().passHessian(
            int(low.shape[0]), int(low.nnz), highspy.HessianFormat.kTriangular,
            low.indptr.astype(np.int32), low.indices.astype(np.int32),
            low.data.astype(np.float64))

    def run(self) -> LpOutcome:
        """Solve the loaded model (warm-started if it was solved before)."""
        import highspy  # lazy: +16 ms at every `tessera` start

        h = self._highs()
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kOptimal:
            return LpOutcome("optimal", np.asarray(h.getSolution().col_value, dtype=np.float64))
        if status in (
            highspy.HighsModelStatus.kInfeasible,
            # presolve's verdict; our LPs have bounded objectives, so this means infeasible
            highspy.HighsModelStatus.kUnboundedOrInfeasible,
        ):
            return LpOutcome("infeasible", None)
        return LpOutcome(h.modelStatusToString(status), None)


def solve_lp(model: LpModel, what: str = "allocation LP", method: LpMethod = "choose",
             solver: LpSolver | None = None) -> np.ndarray:
    """One-shot :meth:`LpSolver.solve` on ``solver`` (a fresh one when ``None``).

    Raises:
        SolverError: infeasible, unbounded or otherwise not optimal.
    """
    lp = solver if solver is not None else LpSolver()
    return lp.solve(model, what, method)
