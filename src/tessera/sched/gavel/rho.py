"""Finish-time fairness (Themis): minimise the worst ρ.

A job's **ρ** compares how long it takes under the shared cluster with how long it would take
alone on its fair slice::

    ρ_m(X) = (t_m + R_m / thr_m(X)) / D_m,     thr_m(X) = Σ_j T[m, j] X[m, j]

``t_m`` is the time it has already spent in the system, ``R_m`` its remaining steps, and ``D_m``
the finish time it would have on its isolated share (Tessera: ``t_m + R_m / thr_m(X_iso)``;
Gavel: cumulative isolated time ``C_m + R_m / iso_m``). ρ = 1 means "as if alone"; the policy
minimises the largest ρ.

``R / thr`` is convex, not linear, but for a *fixed* target ρ the question "can every job reach
ρ?" is linear: job ``m`` needs ``thr_m(X) >= R_m / (ρ·D_m − t_m)``, a lower bound on a linear
function of ``X``. So we **bisect on ρ**: keep a bracket ``[lo, hi]`` with ``lo`` infeasible (or
the trivial bound ``max t/D``) and ``hi`` feasible, probe the middle with that feasibility LP,
and halve until ``hi − lo <= tolerance · hi``. Every probe changes only the rate rows' lower
bounds, so with ``warm_start`` the model stays loaded in HiGHS and each probe restarts from the
previous basis (a fraction of a cold solve), and a feasible probe's ``X`` may already be better
than the ρ it was asked for, which tightens ``hi`` for free. ``--compat gavel`` keeps Gavel's
settings: cold probes, 1e-7, and a final re-solve at ``hi`` with the chosen HiGHS method.

With ``ecos`` the convex programme is handed to cvxpy as Gavel writes it (``inv_pos``); no
bisection.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tessera.sched.gavel.problem import ShareProblem, Variables, base_constraints
from tessera.sched.gavel.solver import Backend, Solved
from tessera.sched.lp import INF, LpMethod


@dataclass(frozen=True, slots=True)
class RhoInputs:
    """Per-job inputs of ρ (arrays aligned with the problem's rows).

    Attributes:
        since_s: ``t_m``, seconds since submission.
        remaining: ``R_m``, remaining steps.
        isolated_s: ``D_m``, the isolated finish time (the denominator of ρ).
        live: jobs that count (can run somewhere); the others need nothing.
    """

    since_s: np.ndarray
    remaining: np.ndarray
    isolated_s: np.ndarray
    live: np.ndarray

    def need(self, rho: float) -> np.ndarray | None:
        """Rates reaching ``rho`` (0 for jobs that are not live); ``None`` when some live job
        cannot reach it at any rate (``ρ·D <= t``)."""
        slack = rho * self.isolated_s - self.since_s
        if np.any(self.live & (slack <= 0)):
            return None
        return np.where(self.live, self.remaining / np.where(slack > 0, slack, 1.0), 0.0)

    def worst(self, x: np.ndarray, tput: np.ndarray) -> float:
        """``max_m ρ_m(X)`` over live jobs (``inf`` if one gets no throughput)."""
        thr = (tput * x).sum(axis=1)
        with np.errstate(divide="ignore"):
            rho = (self.since_s + self.remaining / thr) / self.isolated_s
        rho = np.where(self.live, np.where(thr > 0, rho, INF), -INF)
        return float(rho.max()) if len(rho) else 0.0


@dataclass(frozen=True, slots=True)
class RhoSearch:
    """How to search.

    Attributes:
        tolerance: stop when ``hi − lo <= tolerance · hi``.
        start_hi: first upper probe; ``None`` = ``max(2·lo, 1)`` (Gavel compat).
        give_up_hi: stop doubling ``hi`` beyond this and report no solution.
        warm_start: keep the model loaded between probes (Tessera); cold probes reproduce the
            recorded ``--compat gavel`` figures bit for bit.
        polish: re-solve at the final ``hi`` with the backend's own method (IPM for
            ``highs-ipm``), as Gavel compat does; otherwise return the last feasible probe.
        gavel_form: a variable for every pair, unbounded above (Gavel's LP).
    """

    tolerance: float = 1e-3
    start_hi: float | None = 1.0
    give_up_hi: float = 1e9
    warm_start: bool = True
    polish: bool = False
    gavel_form: bool = False


def min_max_rho(
    p: ShareProblem,
    inputs: RhoInputs,
    backend: Backend,
    search: RhoSearch,
    known: tuple[float, np.ndarray] | None = None,
    what: str = "finish-time fairness LP",
) -> Solved:
    """Shares minimising ``max_m ρ_m``.

    Args:
        p: the problem (``T`` as the policy sees it).
        inputs: ``t``, ``R``, ``D`` and the live mask.
        backend: method and HiGHS instance.
        search: bisection settings.
        known: ``(ρ, X)`` already known to be feasible (e.g. the isolated share at ρ = 1),
            used as the first ``hi`` instead of probing it.
        what: the LP's name in fallback notes.

    Returns:
        ``Solved`` with ``x`` = ``None`` when no ρ up to ``give_up_hi`` is reachable (or ECOS
        fails); ``value`` = the final ``hi``.
    """
    if backend.method == "ecos":
        x = _ecos(p, inputs)
        return Solved(x, () if x is not None else (f"{what}: ECOS returned no solution",))
    probe = _Prober(p, inputs, backend, search)
    lo = float(np.max(np.where(inputs.live, inputs.since_s / inputs.isolated_s, 0.0)))
    if known is not None:
        hi, best = known
    else:
        hi = search.start_hi if search.start_hi is not None else max(lo * 2.0, 1.0)
        first = probe(hi)
        while first is None:
            hi *= 2.0
            if hi > search.give_up_hi:
                return Solved(None, (*probe.notes, f"{what}: no ρ <= {search.give_up_hi:g}"))
            first = probe(hi)
        best = first
    if not search.polish:  # a feasible X may beat the ρ it was asked for
        hi = min(hi, inputs.worst(best, p.tput))
    while hi - lo > search.tolerance * hi:
        mid = 0.5 * (lo + hi)
        x = probe(mid)
        if x is None:
            lo = mid
        else:
            best = x
            hi = mid if search.polish else min(mid, inputs.worst(x, p.tput))
    notes = probe.notes
    if search.polish:
        final = probe(hi, backend.lp_method, cold=True)
        if final is None:
            notes += (f"{what}: the final {backend.method} solve at ρ={hi:.6g} failed; "
                      "kept the last feasible bisection point",)
        else:
            best = final
    return Solved(best, notes, hi)


class _Prober:
    """The feasibility LP ``thr_m(X) >= need_m(ρ)`` under the base constraints, re-solved for
    one ρ after another."""

    def __init__(
        self, p: ShareProblem, inputs: RhoInputs, backend: Backend, search: RhoSearch
    ) -> None:
        self.inputs, self.backend, self.search = inputs, backend, search
        m_count = p.shape[0]
        self.v = Variables.every_pair(p) if search.gavel_form else Variables.runnable(p)
        base, upper = base_constraints(p, self.v)
        rate = self.v.per_job(p.tput, np.arange(m_count))
        self.mat = sp.vstack([base, rate]).tocsc()
        self.upper = np.concatenate([upper, np.full(m_count, INF)])
        self.rate_rows = np.arange(base.shape[0], self.mat.shape[0])
        self.n_base = base.shape[0]
        self.loaded = False
        self.notes: tuple[str, ...] = ()

    def __call__(self, rho: float, method: LpMethod = "choose", cold: bool = False
                 ) -> np.ndarray | None:
        need = self.inputs.need(rho)
        if need is None:
            return None
        n = len(self.v)
        lp = self.backend.lp
        if cold or not self.search.warm_start or not self.loaded:
            lp.load(
                np.zeros(n), self.mat, np.concatenate([np.full(self.n_base, -INF), need]),
                self.upper, np.zeros(n), np.full(n, self.v.x_upper), maximize=False,
                method=method,
            )
            self.loaded = self.search.warm_start and not cold
        else:
            lp.set_row_lower(self.rate_rows, need)
        out = lp.run()
        if out.x is None:
            if out.status != "infeasible":
                self.notes += (f"ρ={rho:.6g}: HiGHS ended with {out.status!r}; "
                               "taken as infeasible",)
            return None
        return self.v.scatter(out.x)


def _ecos(p: ShareProblem, inputs: RhoInputs) -> np.ndarray | None:
    """Gavel's cvxpy formulation (``inv_pos`` of the rate), solved by ECOS."""
    import cvxpy as cp

    m, n = p.shape
    t, r, d = inputs.since_s, inputs.remaining, inputs.isolated_s
    x = cp.Variable((m, n))
    sfa = np.repeat(p.scale[:, None], n, axis=1)
    fracs = [
        (t[i] + r[i] * cp.inv_pos(cp.sum(cp.multiply(p.tput[i], x[i])))) / d[i]
        for i in range(m)
    ]
    obj = fracs[0] if m == 1 else cp.maximum(*fracs)
    cons = [x >= 0, cp.sum(cp.multiply(sfa, x), axis=0) <= p.capacity, cp.sum(x, axis=1) <= 1]
    prob = cp.Problem(cp.Minimize(obj), cons)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prob.solve(solver="ECOS")
    except cp.error.SolverError:
        return None
    if x.value is None:
        return None
    return np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)
