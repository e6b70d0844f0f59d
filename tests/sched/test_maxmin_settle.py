"""max_min_fairness's second stage (:mod:`tessera.sched.gavel.maxmin_settle`): one defined
allocation among the max-min LP's optima, and one that a 1 % speed error barely moves."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.sched.catalog import make_policy
from tessera.sched.core.lp import LpSolver
from tessera.sched.gavel import Backend, maxmin_settle
from tessera.sched.gavel.maxmin_settle import Settle, settled_max_min_shares
from tests.sched.test_maxmin_stability import share_problem


def test_several_optima_second_stage_picks_the_defined_one() -> None:
    """Job 0 earns 2 on the fast flavor and 1 on the slow one, job 1 earns 1 on either; one
    GPU of each. The best minimum is 1 (job 1 can earn no more), reached by many
    allocations: the equal split ([.5, .5] each: rates 1.5 and 1) as well as job 0 on the
    fast GPU and job 1 on the slow one (rates 2 and 1). The second stage takes the one with
    the most total normalised rate -- the latter, exactly -- with the ridge or without."""
    a = np.array([[2.0, 1.0], [1.0, 1.0]])
    p = share_problem(a, [1, 1], [1, 1])
    split = np.full((2, 2), 0.5)
    assert (a * split).sum(axis=1).min() == pytest.approx(1.0)  # (also optimal for the LP)
    for settle in (Settle(), Settle(ridge=0.0), Settle(slack=0.01)):
        got = settled_max_min_shares(p, a, Backend(LpSolver()), settle)
        assert got.value == pytest.approx(1.0)
        assert got.x == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]), abs=1e-6)
        assert got.fallbacks == ()


def test_identical_jobs_still_share_alike() -> None:
    """Two identical jobs (one class) and a third that can only use the slow flavor: the
    identical pair gets equal shares (the class reduction's split, kept by the QP)."""
    a = np.array([[3.0, 1.0], [3.0, 1.0], [0.0, 1.0]])
    got = settled_max_min_shares(share_problem(a, [1, 1, 1], [1, 2]), a, Backend(LpSolver()),
                                 Settle())
    assert got.x is not None
    assert got.x[0] == pytest.approx(got.x[1], abs=1e-9)


def test_settle_none_is_the_vertex_and_bad_options_are_refused() -> None:
    a = np.array([[2.0, 1.0], [1.0, 1.0]])
    p = share_problem(a, [1, 1], [1, 1])
    plain = make_policy("max_min_fairness:settle=none")
    x, _ = plain.allocate(None, p, Backend(LpSolver()))
    assert x.shape == (2, 2)
    assert (a * x).sum(axis=1).min() == pytest.approx(1.0)
    with pytest.raises(SpecError, match="settle"):
        make_policy("max_min_fairness:settle=leximin")
    with pytest.raises(SpecError, match="settle_slack"):
        make_policy("max_min_fairness:settle_slack=1")
    with pytest.raises(SpecError, match="settle_ridge"):
        make_policy("max_min_fairness:settle_ridge=nan")
    with pytest.raises(ValueError, match="slack"):
        Settle(slack=-0.1)


def test_a_stalled_qp_keeps_the_first_stage_and_says_so(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Past its iteration cap the second stage gives up: the max-min LP's own shares, and a
    fallback note naming the LP."""
    monkeypatch.setattr(maxmin_settle, "QP_ITERATIONS_PER_COLUMN", 0)
    a = np.array([[2.0, 1.0], [1.0, 1.0]])
    got = settled_max_min_shares(share_problem(a, [1, 1], [1, 1]), a, Backend(LpSolver()),
                                 Settle(), "test LP")
    assert got.x is not None
    assert (a * got.x).sum(axis=1).min() == pytest.approx(1.0)
    assert got.fallbacks == ("test LP: the second stage found no optimum; kept the first "
                             "stage's vertex",)


def test_the_qp_does_not_leak_into_the_next_lp() -> None:
    """A solver that ran the QP solves the next plain LP as a fresh one does."""
    a = np.array([[2.0, 1.0], [1.0, 1.0], [1.0, 3.0]])
    p = share_problem(a, [1, 1, 1], [2, 1])
    used = Backend(LpSolver())
    settled_max_min_shares(p, a, used, Settle())
    again = settled_max_min_shares(p, a, used, None)
    fresh = settled_max_min_shares(p, a, Backend(LpSolver()), None)
    assert again.x == pytest.approx(fresh.x)
