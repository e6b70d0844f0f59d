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
and halve until ``hi − lo <= tolerance · hi``. Many allocations reach the final ρ, and which
one a probe returns depends on the solver's path; with ``settle`` weights one more LP at the
final ρ returns the best of them by a stated measure instead. Every probe changes only the rate
rows' lower bounds, so with ``warm_start`` the model stays loaded in HiGHS and each probe
restarts from the previous basis (a fraction of a cold solve), and a feasible probe's ``X`` may
already be better than the ρ it was asked for, which tightens ``hi`` for free.

The warm search first bisects a ~100-row relaxation (one row per class of identical jobs) for
a lower bound ``lo`` and aims just above it, at ``lo·(1 + tolerance/2)``: if that is feasible
the bracket is closed at once. With ``settle`` weights the aim is probed by the settling LP
itself (an infeasible settling LP is an infeasible probe), so the usual case costs one probe
at ``start_hi``, the relaxation, and one settling solve from the probe's basis (kept across
the relaxation's LPs) -- at 2,048 jobs two large LPs instead of three, about 270 → 170 ms of
CPU per decision (``docs/scheduler.md``).
``--compat gavel`` keeps Gavel's settings: cold probes, 1e-7, and a final re-solve at ``hi``
with the chosen HiGHS method.

With ``ecos`` the convex programme is handed to cvxpy as Gavel writes it (``inv_pos``); no
bisection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tessera.sched.core.lp import INF, LpMethod, LpModel, LpSolver
from tessera.sched.gavel.problem import ShareProblem, Variables, base_constraints
from tessera.sched.gavel.solver import Backend, Solved, solve_ecos


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
    settle: np.ndarray | None = None,
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
        settle: weights ``w``; when given, every probe returns, among the allocations reaching
            its ρ, one maximising ``Σ_m w_m · thr_m(X)`` -- an answer that is the problem's,
            not the solver path's (see ``FinishTimeConfig.settle``).

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
    settled = False  # ``best`` is already the settling LP's answer at the final ρ
    if search.warm_start and hi - lo > search.tolerance * hi:
        # Aim first just above a cheap lower bound: often one full solve then closes the gap.
        # With settle weights that solve *is* the settling LP at the aim -- feasible, it is
        # the answer (the gap is then within the tolerance), and the feasibility probe is
        # skipped; it starts from the last probe's basis, kept across the bound's LPs.
        probe.keep_basis()
        lo = max(lo, _class_lower_bound(p, inputs, backend.lp, lo, hi, search.tolerance))
        aim = min(lo * (1.0 + 0.5 * search.tolerance), hi)
        if aim < hi:
            x = probe(aim) if settle is None else probe.settle(aim, settle)
            if x is None:
                lo = aim
            else:
                best, hi, settled = x, min(aim, inputs.worst(x, p.tput)), settle is not None
    while hi - lo > search.tolerance * hi:
        mid = 0.5 * (lo + hi)
        x = probe(mid)
        if x is None:
            lo = mid
        elif search.polish:
            hi = mid  # the polish solve below replaces X; ``best`` stays the first feasible
        else:
            best, hi, settled = x, min(mid, inputs.worst(x, p.tput)), False
    return _final(probe, backend, search, hi, best, None if settled else settle, what)


def _final(probe: _Prober, backend: Backend, search: RhoSearch, hi: float, best: np.ndarray,
           settle: np.ndarray | None, what: str) -> Solved:
    """The answer at ρ ``hi``: the settling LP's (``settle``, if not yet solved there), then
    the polish solve (``search.polish``); each kept, with a note, when it fails."""
    notes = probe.notes
    if settle is not None:
        x = probe.settle(hi, settle)
        if x is None:
            notes += (f"{what}: the settling solve at ρ={hi:.6g} failed; kept the search's "
                      "last feasible point",)
        else:
            best = x
    if search.polish:
        final = probe(hi, backend.lp_method, cold=True)
        if final is None:
            # Recorded --compat gavel figures keep the *first* feasible point here (the ρ found
            # by the doubling), not the last bisection point; kept so they do not move.
            notes += (f"{what}: the final {backend.method} solve at ρ={hi:.6g} failed; "
                      "kept the first feasible point",)
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
        self.rate = rate
        self.mat = sp.vstack([base, rate]).tocsc()
        self.upper = np.concatenate([upper, np.full(m_count, INF)])
        self.rate_rows = np.arange(base.shape[0], self.mat.shape[0])
        self.tput = p.tput
        self.n_base = base.shape[0]
        self.loaded = -1  # the solver's load count when our model went in; -1: not ours
        self.objective = False  # the loaded model carries a settling objective
        self.kept: object = None  # a warm probe's basis, kept by :meth:`keep_basis`
        self.notes: tuple[str, ...] = ()

    def __call__(self, rho: float, method: LpMethod = "choose", cold: bool = False
                 ) -> np.ndarray | None:
        need = self.inputs.need(rho)
        if need is None:
            return None
        lp = self.backend.lp
        if cold or not self.search.warm_start or self.loaded != lp.loads:
            lp.load(self._model(need, np.zeros(len(self.v)), maximize=False), method)
            warm = self.search.warm_start and not cold
            self.loaded = lp.loads if warm else -1
            if warm:
                self._crash(need)
        else:
            lp.set_row_lower(self.rate_rows, need)
            if self.objective:  # back to a feasibility problem after a failed settle
                lp.set_objective(np.zeros(len(self.v)), maximize=False)
        self.objective = False
        out = lp.run()
        if self.loaded == lp.loads:
            lp.use_dual()
        if out.x is None:
            if out.status != "infeasible":
                self.notes += (f"ρ={rho:.6g}: HiGHS ended with {out.status!r}; "
                               "taken as infeasible",)
            return None
        return self.v.scatter(out.x)

    def _model(self, need: np.ndarray, cost: np.ndarray, maximize: bool) -> LpModel:
        """The base constraints with every job's rate row held to ``need``."""
        n = len(self.v)
        return LpModel(cost, self.mat, np.concatenate([np.full(self.n_base, -INF), need]),
                       self.upper, np.zeros(n), np.full(n, self.v.x_upper), maximize)

    def keep_basis(self) -> None:
        """Remember the loaded model's basis, so :meth:`settle` can start from it even if
        side problems are solved on the same solver in between."""
        if self.search.warm_start and self.loaded == self.backend.lp.loads:
            self.kept = self.backend.lp.basis()

    def settle(self, rho: float, weight: np.ndarray) -> np.ndarray | None:
        """Among the allocations reaching ``rho``, one maximising ``Σ_m weight_m · thr_m(X)``;
        ``None`` when nothing reaches ``rho`` (so it doubles as a probe).

        With the probes' model still loaded, only the rate rows' bounds and the objective
        change and the solve starts from the last basis (about 6x cheaper than a fresh solve
        with the objective at 2,048 jobs; a crash start is worse still, since the objective
        moves hundreds of jobs off their need). Otherwise the model is loaded afresh, from
        the basis :meth:`keep_basis` kept if there is one.
        """
        need = self.inputs.need(rho)
        if need is None:
            return None
        lp = self.backend.lp
        cost = np.asarray(self.rate.T @ weight, dtype=np.float64).ravel()
        if self.loaded == lp.loads:
            lp.set_row_lower(self.rate_rows, need)
            lp.set_objective(cost, maximize=True)
        else:
            lp.load(self._model(need, cost, maximize=True))
            if self.kept is not None:
                lp.restore_basis(self.kept)
                self.kept = None
            self.loaded = lp.loads if self.search.warm_start else -1
        self.objective = True
        out = lp.run()
        if out.x is None:
            if out.status != "infeasible":
                self.notes += (f"settling at ρ={rho:.6g}: HiGHS ended with {out.status!r}; "
                               "taken as infeasible",)
            return None
        return self.v.scatter(out.x)

    def _crash(self, need: np.ndarray) -> None:
        """Start the first warm probe from "every job on its fastest flavor, meeting exactly its
        need": one basic column and one tight rate row per job that needs anything. Capacity
        rows are then typically over-subscribed on the fast flavors, which primal simplex
        repairs in far fewer pivots than starting from ``X = 0`` (about 3× faster at 2,048
        jobs)."""
        v, tput = self.v, self.tput
        m_count = len(need)
        rate = tput[v.rows, v.cols]
        best = np.full(m_count, -1.0)
        np.maximum.at(best, v.rows, rate)
        wanted = (need > 0) & (best > 0)
        first = np.full(m_count, -1)
        is_best = (rate == best[v.rows]) & wanted[v.rows]
        cols = np.flatnonzero(is_best)
        first[v.rows[cols[::-1]]] = cols[::-1]  # the first such column of each job
        basic = np.zeros(len(v), dtype=bool)
        basic[first[wanted]] = True
        tight = np.zeros(self.mat.shape[0], dtype=bool)
        tight[self.rate_rows[wanted]] = True
        self.backend.lp.start_from(basic, tight)


def _class_lower_bound(
    p: ShareProblem, inputs: RhoInputs, lp: LpSolver, lo: float, hi: float, tol: float
) -> float:
    """A lower bound on the optimal ρ from a relaxation with one row per *class* of jobs.

    Jobs with the same throughput row and gang size form a class ``C``; only the class's total
    time per flavor ``y_C`` is kept. Any feasible ``X`` gives a ``y_C`` that (a) fits in
    ``|C|`` jobs' time, (b) delivers the class's total need, and (c) for the ``k`` fastest
    flavors, spends at least ``Σ_m (n_m − T_(k+1)) / (T_(1) − T_(k+1))`` there (a job that needs
    more than the (k+1)-th rate cannot make it without them). So the relaxation's best ρ is a
    lower bound; bisecting it costs ~100-row LPs instead of 2,048-row ones.
    """
    live = inputs.live
    key = np.hstack([p.tput, p.scale[:, None]])[live]
    if len(key) == 0:
        return lo
    classes, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    c_count, j_count = len(classes), p.shape[1]
    tput, scale = classes[:, :j_count], classes[:, j_count]
    order = np.argsort(-tput, axis=1, kind="stable")
    ranked = np.take_along_axis(tput, order, axis=1)
    nxt = np.hstack([ranked[:, 1:], np.zeros((c_count, 1))])  # T_(k+1), 0 after the last
    counts = np.bincount(inverse, minlength=c_count).astype(float)
    # columns y[c, j] (every pair); rows: time per class, capacity per flavor, rate per
    # class, then per k one "time on the k fastest flavors" row per class
    n = c_count * j_count
    var = np.arange(n)
    cls, col = var // j_count, var % j_count
    rank_of = np.argsort(order, axis=1)[cls, col]
    blocks = [
        sp.csr_matrix((np.ones(n), (cls, var)), shape=(c_count, n)),
        sp.csr_matrix((scale[cls], (col, var)), shape=(j_count, n)),
        sp.csr_matrix((tput[cls, col], (cls, var)), shape=(c_count, n)),
    ]
    for k in range(j_count):
        keep = rank_of <= k
        blocks.append(sp.csr_matrix((np.ones(int(keep.sum())), (cls[keep], var[keep])),
                                    shape=(c_count, n)))
    mat = sp.vstack(blocks).tocsc()
    upper = np.concatenate([counts, p.capacity, np.full(c_count * (1 + j_count), INF)])
    top = ranked[inverse, 0]

    def feasible(rho: float) -> bool:
        need = inputs.need(rho)
        if need is None:
            return False
        need = need[live]
        if np.any(need > top * (1 + 1e-9)):
            return False
        lower = [np.full(c_count + j_count, -INF), np.bincount(inverse, need, c_count)]
        for k in range(j_count):
            gap = top - nxt[inverse, k]
            g = np.where(gap > 0, np.maximum(need - nxt[inverse, k], 0.0) / np.where(
                gap > 0, gap, 1.0), 0.0)
            lower.append(np.bincount(inverse, g, c_count))
        out = lp.attempt(LpModel(np.zeros(n), mat, np.concatenate(lower), upper, np.zeros(n),
                                 np.full(n, INF), maximize=False))
        return out.optimal

    while hi - lo > 0.25 * tol * hi:
        mid = 0.5 * (lo + hi)
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return lo


def _ecos(p: ShareProblem, inputs: RhoInputs) -> np.ndarray | None:
    """Gavel's cvxpy formulation (``inv_pos`` of the rate), solved by ECOS."""
    import cvxpy as cp  # lazy: optional gavel-compat extra, +1.2 s

    t, r, d = inputs.since_s, inputs.remaining, inputs.isolated_s
    x = cp.Variable(p.shape)
    fracs = [(t[i] + r[i] * cp.inv_pos(cp.sum(cp.multiply(p.tput[i], x[i])))) / d[i]
             for i in range(p.shape[0])]
    obj = fracs[0] if len(fracs) == 1 else cp.maximum(*fracs)
    return solve_ecos(p, cp.Minimize(obj), x)
