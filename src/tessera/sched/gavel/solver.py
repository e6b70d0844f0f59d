"""Which optimiser solves Gavel's programmes, and the record of every fallback.

Max-min fairness only pins the *minimum*; how the slack is split (across flavors, and among the
jobs that are not the bottleneck) is whatever the solver returns. An interior-point method
(ECOS, Gavel's default; HiGHS IPM without crossover) stops near the centre of the optimal face,
a simplex method at a vertex. The split changes priorities and therefore JCTs, so the solver is
an explicit parameter:

* ``highs`` -- HiGHS, simplex (a vertex); Tessera's own policies use this;
* ``highs-ipm`` -- HiGHS interior point without crossover (a centred point, not ECOS' centre);
* ``ecos`` -- cvxpy + ECOS on Gavel's own formulation (optional extra ``tessera[gavel-compat]``);
* ``auto`` -- ``ecos`` when cvxpy and ECOS are importable, else ``highs-ipm``.

When the chosen path fails and another is used, the function says so in the ``fallbacks`` of
its :class:`Solved` result; the policy puts those into ``Ranking.fallbacks``. Nothing falls back
silently.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tessera.sched.core.lp import LpMethod, LpSolver, SolverError

if TYPE_CHECKING:
    from tessera.sched.gavel.problem import ShareProblem

SolverName = Literal["auto", "ecos", "highs", "highs-ipm"]
Method = Literal["ecos", "highs", "highs-ipm"]


def ecos_available() -> bool:
    """Whether cvxpy and ECOS are importable."""
    try:
        import cvxpy  # noqa: F401  (lazy: probes the optional gavel-compat extra)
        import ecos  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_solver(name: SolverName) -> Method:
    """``auto`` → ``ecos`` when installed, else ``highs-ipm``.

    Raises:
        SolverError: ``ecos`` asked for but not installed.
    """
    if name == "auto":
        return "ecos" if ecos_available() else "highs-ipm"
    if name == "ecos" and not ecos_available():
        raise SolverError(
            "solver 'ecos' needs cvxpy and ecos (pip install 'tessera[gavel-compat]')"
        )
    return name


@dataclass(frozen=True, slots=True)
class Backend:
    """How to solve: the method, and the HiGHS instance to run it on.

    Attributes:
        lp: the HiGHS instance (also used when ECOS fails).
        method: ``highs``, ``highs-ipm`` or ``ecos``.
    """

    lp: LpSolver
    method: Method = "highs"

    @property
    def lp_method(self) -> LpMethod:
        """HiGHS' algorithm for this method (ECOS' fallback runs interior point too)."""
        return "choose" if self.method == "highs" else "ipm"


@dataclass(frozen=True, slots=True)
class Solved:
    """A solver's answer.

    Attributes:
        x: dense ``M × J`` shares, or ``None`` when nothing usable was found (the caller then
            falls back itself and must say so).
        fallbacks: what was used instead of what was asked for, in words.
        value: the objective (max-min: the minimum normalised rate; ρ search: the worst ρ
            bound), ``nan`` when unknown.
    """

    x: np.ndarray | None
    fallbacks: tuple[str, ...] = ()
    value: float = float("nan")


def solve_ecos(p: ShareProblem, objective: Any, x: Any) -> np.ndarray | None:
    """Solve Gavel's cvxpy form of a share problem with ECOS: ``objective`` over the shares
    ``x`` (a ``cvxpy.Variable`` of ``p.shape``) under Gavel's base constraints -- shares are
    non-negative, each flavor's scaled shares fit its capacity, each job's shares sum to at
    most 1. Returns the shares clipped to [0, 1], or ``None`` when ECOS gives nothing."""
    import cvxpy as cp  # lazy: optional gavel-compat extra, +1.2 s

    n = p.shape[1]
    sfa = np.repeat(p.scale[:, None], n, axis=1)
    cons = [x >= 0, cp.sum(cp.multiply(sfa, x), axis=0) <= p.capacity, cp.sum(x, axis=1) <= 1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cp.Problem(objective, cons).solve(solver="ECOS")
    except cp.error.SolverError:
        return None
    if x.value is None:
        return None
    return np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)
