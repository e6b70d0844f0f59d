"""The max-sum-throughput LP (``tessera.sched.gavel.maxsum``) against independent checks.

* its total throughput equals the optimum of the same LP posed independently with
  ``scipy.optimize.linprog`` (one variable per pair, no class merging), on every solver path;
* on tiny problems no point of a grid over the shares beats it;
* identical jobs get identical shares (the class merging), and the answer is deterministic.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from scipy.optimize import linprog

from tessera.sched.core.lp import LpSolver
from tessera.sched.gavel import Backend, ShareProblem, max_sum_shares
from tessera.sched.gavel.solver import ecos_available
from tests.sched.test_gavel_maths import _base_rows, _feasible, problems


def _linprog_max_sum(p: ShareProblem) -> float:
    """``max Σ T·x`` under the base constraints, posed directly (variables row-major)."""
    base, ub = _base_rows(p)
    bounds = [(0, 1 if p.tput.flat[k] > 0 else 0) for k in range(p.tput.size)]
    res = linprog(-p.tput.reshape(-1), A_ub=base, b_ub=ub, bounds=bounds, method="highs-ds")
    assert res.status == 0
    return float(-res.fun)


def _total(p: ShareProblem, x: np.ndarray) -> float:
    return float((p.tput * x).sum())


@pytest.mark.parametrize("method,gavel_form", [("highs", False), ("highs-ipm", False),
                                               ("highs", True), ("highs-ipm", True)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=problems())
def test_max_sum_reaches_the_independent_optimum(p: ShareProblem, method: str,
                                                  gavel_form: bool) -> None:
    """Gavel's form keeps a variable on pairs that cannot run (zero gain, any value the solver
    leaves); feasibility there means the base constraints only."""
    got = max_sum_shares(p, Backend(LpSolver(), method), gavel_form=gavel_form)  # type: ignore[arg-type]
    assert got.x is not None
    open_pairs = ShareProblem(p.jobs, p.flavors, np.ones_like(p.tput), p.scale, p.weight,
                              p.capacity)
    assert _feasible(open_pairs if gavel_form else p, got.x)
    best = _linprog_max_sum(p)
    assert _total(p, got.x) == pytest.approx(best, rel=1e-5, abs=1e-7)
    assert got.value == pytest.approx(best, rel=1e-5, abs=1e-7)


@pytest.mark.skipif(not ecos_available(), reason="needs the gavel-compat extra (cvxpy, ecos)")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=problems())
def test_ecos_path_reaches_the_independent_optimum(p: ShareProblem) -> None:
    got = max_sum_shares(p, Backend(LpSolver(), "ecos"), gavel_form=True)
    assert got.x is not None and not got.fallbacks
    # ECOS works to ~1e-8 relative; pairs with zero throughput may keep a tiny share there.
    assert _total(p, got.x) == pytest.approx(_linprog_max_sum(p), rel=1e-5, abs=1e-6)


def test_no_grid_point_beats_it() -> None:
    """Two jobs, two flavors of one GPU each: brute force over shares in steps of 0.05."""
    p = ShareProblem(("a", "b"), ("fast", "slow"), np.array([[3.0, 1.0], [2.0, 1.5]]),
                     np.ones(2), np.ones(2), np.ones(2))
    got = max_sum_shares(p, Backend(LpSolver()))
    assert got.x is not None
    grid = np.linspace(0, 1, 21)
    best = 0.0
    for xa, ya, xb, yb in itertools.product(grid, repeat=4):
        x = np.array([[xa, ya], [xb, yb]])
        if _feasible(p, x):
            best = max(best, _total(p, x))
    assert _total(p, got.x) >= best - 1e-9
    # a on the fast flavor, b on the slow one (3 + 1.5 beats 2 + 1)
    assert got.x == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]))


def test_slow_job_gets_nothing_while_faster_ones_fill_the_flavor() -> None:
    """The known weakness: one GPU, a fast and a slow job: the slow one's share is 0."""
    p = ShareProblem(("fast", "slow"), ("v100",), np.array([[24.0], [13.0]]), np.ones(2),
                     np.ones(2), np.ones(1))
    got = max_sum_shares(p, Backend(LpSolver()))
    assert got.x is not None
    assert got.x[:, 0] == pytest.approx([1.0, 0.0])


def test_identical_jobs_get_identical_shares_and_answers_repeat() -> None:
    """Four identical 1-GPU jobs on 2 GPUs: the optimum is a face; each job gets 0.5."""
    p = ShareProblem(tuple("abcd"), ("v100",), np.full((4, 1), 5.0), np.ones(4), np.ones(4),
                     np.array([2.0]))
    first = max_sum_shares(p, Backend(LpSolver()))
    again = max_sum_shares(p, Backend(LpSolver()))
    assert first.x is not None and again.x is not None
    assert first.x[:, 0] == pytest.approx([0.5] * 4)
    assert np.array_equal(first.x, again.x)


def test_empty_problem_has_empty_shares() -> None:
    p = ShareProblem((), ("v100",), np.zeros((0, 1)), np.zeros(0), np.zeros(0), np.ones(1))
    got = max_sum_shares(p, Backend(LpSolver()))
    assert got.x is not None and got.x.shape == (0, 1)
