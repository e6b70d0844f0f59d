"""Gavel's allocation maths (``tessera.sched.gavel``) against independent formulations.

* max-min fairness: the minimum normalised rate equals the optimum of the same LP posed
  independently with ``scipy.optimize.linprog`` (one variable per pair, no symmetry reduction);
* finish-time fairness: the worst ρ of our shares is within the search tolerance of the optimum
  found by an independent bisection with ``linprog`` feasibility problems, and our shares are
  feasible;
* every solver fallback is reported, never silent; no process-wide solver exists.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from tessera.sched.core import lp as lp_module
from tessera.sched.core.lp import LpModel, LpOutcome, LpSolver
from tessera.sched.gavel import (
    Backend,
    RhoInputs,
    RhoSearch,
    ShareProblem,
    max_min_shares,
    min_max_rho,
)


@st.composite
def problems(draw: st.DrawFn) -> ShareProblem:
    """2–7 jobs on 2–3 flavors, some pairs unrunnable, gangs 1/2/4, a few GPUs per flavor."""
    m = draw(st.integers(2, 7))
    j = draw(st.integers(2, 3))
    rates = st.one_of(st.just(0.0), st.floats(0.2, 8.0))
    tput = np.array(draw(st.lists(st.lists(rates, min_size=j, max_size=j),
                                  min_size=m, max_size=m)))
    tput[np.arange(m), draw(st.lists(st.integers(0, j - 1), min_size=m, max_size=m))] = (
        draw(st.floats(0.5, 4.0)))  # every job can run somewhere
    scale = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 4.0]), min_size=m, max_size=m)))
    weight = np.array(draw(st.lists(st.sampled_from([1.0, 2.0]), min_size=m, max_size=m)))
    cap = np.array(draw(st.lists(st.integers(1, 6), min_size=j, max_size=j)), dtype=float)
    return ShareProblem(tuple(str(i) for i in range(m)), tuple(f"f{k}" for k in range(j)),
                        tput, scale, weight, cap)


def _base_rows(p: ShareProblem) -> tuple[np.ndarray, np.ndarray]:
    """Dense base constraints over every pair (row-major ``x[i, j]``)."""
    m, j = p.shape
    a = np.zeros((m + j, m * j))
    for i in range(m):
        a[i, i * j:(i + 1) * j] = 1.0
        for k in range(j):
            a[m + k, i * j + k] = p.scale[i]
    return a, np.concatenate([np.ones(m), p.capacity])


def _linprog_max_min(p: ShareProblem, coef: np.ndarray) -> float:
    """``max z`` s.t. ``z <= coef_i · x_i``, base constraints; variables ``[x, z]``."""
    m, j = p.shape
    base, ub = _base_rows(p)
    fair = np.zeros((m, m * j))
    for i in range(m):
        fair[i, i * j:(i + 1) * j] = -coef[i]
    a = np.vstack([np.hstack([base, np.zeros((m + j, 1))]), np.hstack([fair, np.ones((m, 1))])])
    b = np.concatenate([ub, np.zeros(m)])
    c = np.zeros(m * j + 1)
    c[-1] = -1.0
    bounds = [(0, 1 if p.tput.flat[k] > 0 else 0) for k in range(m * j)] + [(None, None)]
    res = linprog(c, A_ub=a, b_ub=b, bounds=bounds, method="highs-ds")
    assert res.status == 0
    return float(-res.fun)


def _feasible(p: ShareProblem, x: np.ndarray) -> bool:
    tol = 1e-6
    return bool(
        np.all(x >= -tol) and np.all(x.sum(axis=1) <= 1 + tol)
        and np.all((p.scale[:, None] * x).sum(axis=0) <= p.capacity + tol)
        and np.all(x[p.tput <= 0] <= tol)
    )


@pytest.mark.parametrize("method", ["highs", "highs-ipm"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=problems())
def test_max_min_fairness_reaches_the_independent_optimum(p: ShareProblem, method: str) -> None:
    """The smallest normalised rate of our shares is the LP optimum (linprog, no reduction)."""
    iso = max_min_shares(p, (p.tput > 0) * (p.scale / p.weight)[:, None],
                         Backend(LpSolver(), method)).x
    assert iso is not None
    norm = (p.tput * iso).sum(axis=1)
    coef = p.tput * (p.scale / (p.weight * norm))[:, None]
    got = max_min_shares(p, coef, Backend(LpSolver(), method))
    assert got.x is not None and _feasible(p, got.x)
    achieved = float((coef * got.x).sum(axis=1).min())
    best = _linprog_max_min(p, coef)
    assert achieved == pytest.approx(best, rel=1e-5, abs=1e-7)


def _linprog_rho(p: ShareProblem, inp: RhoInputs) -> float:
    """Independent bisection: the smallest ρ for which ``T_i · x_i >= R_i / (ρ D_i − t_i)`` is
    feasible under the base constraints (linprog feasibility problems)."""
    m, j = p.shape
    base, ub = _base_rows(p)
    rate = np.zeros((m, m * j))
    for i in range(m):
        rate[i, i * j:(i + 1) * j] = -p.tput[i]
    bounds = [(0, 1 if p.tput.flat[k] > 0 else 0) for k in range(m * j)]

    def ok(rho: float) -> bool:
        slack = rho * inp.isolated_s - inp.since_s
        if np.any(slack <= 0):
            return False
        res = linprog(np.zeros(m * j), A_ub=np.vstack([base, rate]),
                      b_ub=np.concatenate([ub, -inp.remaining / slack]), bounds=bounds,
                      method="highs-ds")
        return bool(res.status == 0)

    lo, hi = float(np.max(inp.since_s / inp.isolated_s)), 1.0
    while not ok(hi):
        hi *= 2
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _rho_inputs(p: ShareProblem, data: st.DataObject, backend: Backend
                ) -> tuple[RhoInputs, np.ndarray]:
    """Drawn ``t`` and ``R``; ``D`` from the isolated (equal) share, as the policy computes it."""
    m = p.shape[0]
    since = np.array(data.draw(st.lists(st.floats(0, 5e4), min_size=m, max_size=m)))
    remaining = np.array(data.draw(st.lists(st.floats(1e2, 1e6), min_size=m, max_size=m)))
    iso = max_min_shares(p, (p.tput > 0) * (p.scale / p.weight)[:, None], backend).x
    assert iso is not None
    thr_iso = (p.tput * iso).sum(axis=1)
    live = thr_iso > 0
    d = np.where(live, since + remaining / np.where(live, thr_iso, 1.0), 1.0)
    return RhoInputs(since, remaining, d, live), iso


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=problems(), data=st.data())
def test_finish_time_fairness_minimises_the_worst_rho(p: ShareProblem, data: st.DataObject
                                                      ) -> None:
    """Our worst ρ is within the search tolerance of the independent optimum."""
    backend = Backend(LpSolver())
    inp, iso = _rho_inputs(p, data, backend)
    since, remaining, d, live = inp.since_s, inp.remaining, inp.isolated_s, inp.live
    tol = 1e-4
    got = min_max_rho(p, inp, backend, RhoSearch(tolerance=tol), known=(1.0, iso))
    assert got.x is not None and _feasible(p, got.x)
    ours = inp.worst(got.x, p.tput)
    best = _linprog_rho(p.take(np.flatnonzero(live)), RhoInputs(
        since[live], remaining[live], d[live], np.ones(int(live.sum()), dtype=bool)))
    assert ours >= best * (1 - 1e-6)  # nobody beats the optimum ...
    assert ours <= best * (1 + 2 * tol) + 1e-9  # ... and we are within the tolerance


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=problems(), data=st.data(), warm=st.booleans())
def test_settled_allocation_is_the_best_one_reaching_the_rho(
    p: ShareProblem, data: st.DataObject, warm: bool
) -> None:
    """With settle weights the answer still reaches the search's ρ and maximises
    ``Σ w_m · thr_m`` among allocations reaching it (checked against linprog), on the warm
    and the cold search alike."""
    m, j = p.shape
    backend = Backend(LpSolver())
    inp, _iso = _rho_inputs(p, data, backend)
    weight = np.where(inp.live, 1.0 / inp.remaining, 0.0)
    got = min_max_rho(p, inp, backend, RhoSearch(tolerance=1e-4, warm_start=warm),
                      settle=weight)
    assert got.x is not None and _feasible(p, got.x) and got.value is not None
    rho = got.value
    assert inp.worst(got.x, p.tput) <= rho * (1 + 1e-6)
    # linprog: max Σ w_i T_i·x_i  s.t. base rows, T_i·x_i >= need_i(ρ)
    need = inp.need(rho)
    assert need is not None
    base, ub = _base_rows(p)
    rate = np.zeros((m, m * j))
    for i in range(m):
        rate[i, i * j:(i + 1) * j] = p.tput[i]
    bounds = [(0, 1 if p.tput.flat[k] > 0 else 0) for k in range(m * j)]
    res = linprog(-(weight @ rate), A_ub=np.vstack([base, -rate]),
                  b_ub=np.concatenate([ub, -need]), bounds=bounds, method="highs-ds")
    assert res.status == 0
    ours = float(weight @ (p.tput * got.x).sum(axis=1))
    # Two simplex runs agree to their feasibility tolerances (1e-7 on rows whose terms are
    # rates of order 1), not to the last digit: hypothesis found a 1.9e-6 relative gap, and a
    # 1.0e-5 one where the objective was small against its scale (every job at its best rate),
    # which is what the solvers' tolerances are relative to. HiGHS's dual feasibility
    # tolerance (1e-7) is absolute, on reduced costs, and the weights here are 1/remaining
    # (objective coefficients of 1e-4 and less): each of the m*j columns may then sit off the
    # optimum by up to 1e-7 in objective (gaps of 8.6e-8 and 1.1e-7 found on objectives of
    # 0.0086 and 0.0011). A settle that missed the optimum (another vertex) misses by far more.
    scale = float(weight @ p.tput.max(axis=1))
    assert ours == pytest.approx(-res.fun, rel=1e-5, abs=1e-5 * scale + 1e-7 * m * j)


def test_gavel_rho_search_and_max_min_agree_between_cold_and_warm_paths() -> None:
    """The compat settings (cold probes, polish) and Tessera's (warm) find the same ρ."""
    rng = np.random.default_rng(3)
    m, j = 40, 3
    tput = rng.uniform(0.5, 6.0, (m, j))
    p = ShareProblem(tuple(map(str, range(m))), ("a", "b", "c"), tput,
                     rng.choice([1.0, 2.0], m), np.ones(m), np.array([8.0, 8.0, 8.0]))
    inp = RhoInputs(rng.uniform(0, 1e4, m), rng.uniform(1e3, 1e5, m),
                    rng.uniform(2e4, 5e4, m), np.ones(m, dtype=bool))
    backend = Backend(LpSolver())
    warm = min_max_rho(p, inp, backend, RhoSearch(tolerance=1e-6, start_hi=None,
                                                  give_up_hi=1e12))
    cold = min_max_rho(p, inp, backend, RhoSearch(tolerance=1e-6, start_hi=None,
                                                  give_up_hi=1e12, warm_start=False,
                                                  polish=True, gavel_form=True))
    assert warm.x is not None and cold.x is not None
    assert inp.worst(warm.x, tput) == pytest.approx(inp.worst(cold.x, tput), rel=1e-4)


# -- fallbacks are reported ------------------------------------------------------------------


class _FailingIpm(LpSolver):
    """A solver whose interior-point runs end "unknown" (as IPM without crossover sometimes
    does at the edge of feasibility)."""

    def run(self) -> LpOutcome:
        h = self._highs()
        if h.getOptionValue("solver")[1] == "ipm":
            return LpOutcome("Unknown", None)
        return super().run()


def test_a_failed_final_ipm_solve_is_reported() -> None:
    rng = np.random.default_rng(0)
    m = 6
    p = ShareProblem(tuple(map(str, range(m))), ("a", "b"), rng.uniform(1, 4, (m, 2)),
                     np.ones(m), np.ones(m), np.array([2.0, 2.0]))
    inp = RhoInputs(rng.uniform(0, 1e3, m), rng.uniform(1e3, 1e4, m), rng.uniform(5e3, 1e4, m),
                    np.ones(m, dtype=bool))
    search = RhoSearch(tolerance=1e-7, start_hi=None, give_up_hi=1e12, warm_start=False,
                       polish=True, gavel_form=True)
    got = min_max_rho(p, inp, Backend(_FailingIpm(), "highs-ipm"), search)
    assert got.x is not None
    assert any("final highs-ipm solve" in f for f in got.fallbacks)


def test_ecos_failure_falls_back_to_highs_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.sched.gavel import maxmin

    monkeypatch.setattr(maxmin, "_ecos", lambda p, a: None)
    p = ShareProblem(("0", "1"), ("a",), np.array([[1.0], [2.0]]), np.ones(2), np.ones(2),
                     np.array([1.0]))
    got = max_min_shares(p, p.tput, Backend(LpSolver(), "ecos"), "test LP")
    assert got.x is not None
    assert got.fallbacks == ("test LP: ECOS returned no solution; solved with HiGHS IPM instead",)


def test_policy_reports_the_fallback_in_its_ranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finish-time-fairness policy whose ρ search finds nothing ranks on the isolated share
    and says so in ``Ranking.fallbacks``."""
    import random

    from tessera.perf.profiles import default_throughputs
    from tessera.sched.catalog import make_policy
    from tessera.sched.core.oracle import ThroughputOracle
    from tessera.sched.core.policy import PolicyContext
    from tessera.sched.gavel import Solved
    from tessera.sched.gavel import lp_policy as gavel_lp
    from tests.builders import make_cluster, make_job, make_workload

    monkeypatch.setattr(gavel_lp, "min_max_rho", lambda *a, **k: Solved(None, ("no ρ",)))
    from tessera.model.jobs import JobState
    from tessera.sched.core.snapshot import JobView, Snapshot

    cluster = make_cluster().node("v100", gpus=2).build()
    jobs = make_workload(make_job("a", steps=1000), make_job("b", steps=5000)).jobs
    snap = Snapshot(now_s=10.0, cluster=cluster,
                    jobs=tuple(JobView(j, JobState.PENDING, j.total_steps) for j in jobs))
    oracle = ThroughputOracle(default_throughputs(), cluster)
    ctx = PolicyContext(snap, oracle, random.Random(0), solver=LpSolver())
    r = make_policy("finish_time_fairness").rank(ctx)
    assert r.candidates
    assert r.fallbacks == ("no ρ", "finish-time fairness: no ρ found; used the isolated (equal) "
                           "share")


def test_no_process_wide_solver() -> None:
    """The solver is an object the caller owns; the module keeps none."""
    assert not hasattr(lp_module, "_SOLVER")
    a, b = LpSolver(), LpSolver()
    a.solve(LpModel(np.array([1.0]), np.array([[1.0]]), np.array([-np.inf]), np.array([1.0]),
                    np.array([0.0]), np.array([2.0]), maximize=True))
    assert a._highs() is not b._highs()


def test_a_fallback_reaches_the_run_notes_and_the_report(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Solver fallbacks are never silent: the simulator counts them per message into
    ``SimResult.notes``, and the HTML report lists them."""
    from tessera.report.html import write_html_report
    from tessera.sched.gavel import Solved
    from tessera.sched.gavel import lp_policy as gavel_lp
    from tessera.sim.engine import simulate
    from tests.builders import make_cluster, make_job, make_workload

    monkeypatch.setattr(gavel_lp, "min_max_rho", lambda *a, **k: Solved(None, ("no ρ",)))
    cluster = make_cluster().node("v100", gpus=2).build()
    w = make_workload(make_job("a", steps=1000), make_job("b", steps=5000, submit_s=5))
    r = simulate(w, cluster, "finish_time_fairness")
    assert r.summary.succeeded == 2
    assert r.notes and all(n.startswith("solver fallback in ") for n in r.notes)
    assert any("used the isolated (equal) share" in n for n in r.notes)
    assert r.as_dict()["notes"] == list(r.notes)
    page = write_html_report([r], [], tmp_path / "report.html", "t").read_text()
    assert "no ρ" in page
