"""A 1 % speed error barely moves max_min_fairness's shares with its second stage
(``settle=ridge``, :mod:`tessera.sched.gavel.maxmin_settle`); the max-min LP's vertex jumps."""

from __future__ import annotations

import numpy as np

from tessera.sched.catalog import make_policy
from tessera.sched.core.lp import LpSolver
from tessera.sched.gavel import Backend, ShareProblem


def share_problem(tput: np.ndarray, scale: list[int], capacity: list[float]) -> ShareProblem:
    m, j = tput.shape
    return ShareProblem(
        jobs=tuple(str(i) for i in range(m)), flavors=tuple(f"f{k}" for k in range(j)),
        tput=tput, scale=np.array(scale, dtype=float), weight=np.ones(m),
        capacity=np.array(capacity, dtype=float))


#: Six jobs of three kinds on three flavors of 2 GPUs (speeds per kind below), gang sizes 1
#: and 2, and a 1 % error drawn per job and flavor: an instance of the max-min LP whose
#: optimum is degenerate (docs/scheduler.md, "max-min fairness's second stage").
_KINDS = np.array([[4.0, 2.0, 1.0], [3.0, 2.5, 1.0], [2.0, 1.8, 1.5]])
_JOBS = [0, 2, 1, 1, 0, 0]
_SCALE = [2, 1, 1, 2, 2, 2]
_Z = np.array([[0.91, 0.61, 0.83], [0.83, 0.3, -0.54], [-0.31, 1.51, -0.58],
               [-0.23, -0.72, -0.52], [-0.31, 0.26, -0.29], [-0.35, -0.62, 0.09]])


def test_one_percent_speed_error_moves_the_allocation_little() -> None:
    """The policy's shares for the instance above and for its speeds times ``exp(0.01 z)``:
    no share moves by more than 0.1 with ``settle=ridge``; the LP's vertex alone (the
    default, ``settle=none``) moves one by 0.66."""
    pol = make_policy("max_min_fairness:settle=ridge")
    tput = _KINDS[_JOBS]
    exact, _ = pol.allocate(None, share_problem(tput, _SCALE, [2, 2, 2]),
                            Backend(LpSolver()))
    noisy, _ = pol.allocate(None,
                            share_problem(tput * np.exp(0.01 * _Z), _SCALE, [2, 2, 2]),
                            Backend(LpSolver()))
    assert np.abs(exact - noisy).max() < 0.1




def test_the_default_is_the_max_min_lps_own_allocation() -> None:
    """Without options the policy keeps the LP's vertex (``settle=none``): the second stage is
    opt-in (docs/scheduler.md, "max-min fairness's second stage", why)."""
    tput = _KINDS[_JOBS] * np.exp(0.01 * _Z)
    p = share_problem(tput, _SCALE, [2, 2, 2])
    default, _ = make_policy("max_min_fairness").allocate(None, p, Backend(LpSolver()))
    plain, _ = make_policy("max_min_fairness:settle=none").allocate(None, p, Backend(LpSolver()))
    ridge, _ = make_policy("max_min_fairness:settle=ridge").allocate(None, p, Backend(LpSolver()))
    assert np.array_equal(default, plain)
    assert np.abs(default - ridge).max() > 1e-3
