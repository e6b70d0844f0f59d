"""Gavel's allocation policies, solved with HiGHS, and Gavel's round mechanism.

Each policy computes time shares ``X[job, flavor]`` (see :mod:`.allocation`):

* ``max_min_fairness`` (Gavel LAS): maximise the minimum, over jobs, of
  ``sf_m / w_m · Σ_j T[m,j] X[m,j] / norm_m``, where ``norm_m`` is the throughput the job would
  get from the heterogeneity-agnostic fair share ``X_iso``. The agnostic twin drops the
  throughputs (``T = 1``).
* ``finish_time_fairness`` (Themis ρ): minimise ``max_m ρ_m``,
  ``ρ_m = (t_m + R_m / thr_m(X)) / (t_m + R_m / thr_m(X_iso))``: how much later a job finishes
  than on its isolated fair share. ``R/thr`` is convex, not linear, so we bisect on ρ; each step
  is a feasibility LP ``thr_m(X) >= R_m / (ρ·D_m − t_m)``.
* ``min_makespan``: finish everything as early as possible: maximise a common progress rate
  ``r`` with ``thr_m(X) >= r · R_m``; the makespan is ``1/r``.

**Mechanism.** Shares are fractions of time; a round (360 s) runs whole gangs. Before each
round, job ``m``'s priority on flavor ``j`` is ``X[m,j] / f[m,j]``, where ``f`` is the fraction
of the time since the last reallocation that it actually ran there (jobs that have not run yet
get ``X · 1e9``): whoever is furthest behind its share goes first; ties go to the larger
*deficit* (share owed minus time received). Shares are recomputed when the set of jobs changes,
but at most once per ``reallocation_interval_s`` (Gavel: 1,920 s), and the counters restart.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from pydantic import Field

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId
from tessera.sched.policies.allocation import (
    AllocationProblem,
    build_problem,
    feasible_rates,
    share_lp,
)
from tessera.sched.policy import POLICIES, Policy, PolicyConfig, PolicyContext, Ranking


class GavelConfig(PolicyConfig):
    reallocation_interval_s: float = Field(
        1920.0, ge=0, description="minimum seconds between recomputing shares (Gavel: 1920)"
    )


@dataclass(frozen=True, slots=True)
class _RoundState:
    """The mechanism's memory between rounds."""

    shares: Mapping[JobId, tuple[tuple[str, float], ...]]
    reset_s: float
    run_at_reset: Mapping[JobId, tuple[tuple[str, float], ...]]
    jobs: frozenset[JobId]


class GavelAllocationPolicy(Policy):
    """Base for LP policies realised by Gavel's round mechanism."""

    preemptive = True
    round_based = True
    Config = GavelConfig

    @abstractmethod
    def allocate(self, ctx: PolicyContext, p: AllocationProblem) -> np.ndarray:
        """Return the dense ``M × J`` share matrix for problem ``p``."""

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, GavelConfig)
        snap = ctx.snapshot
        state: _RoundState | None = snap.policy_state
        ids = frozenset(j.job_id for j in snap.jobs)
        if not snap.jobs:
            return Ranking((), state=state)
        stale = state is None or (
            ids != state.jobs and snap.now_s - state.reset_s >= cfg.reallocation_interval_s
        )
        if stale:
            p = build_problem(ctx)
            x = self.allocate(ctx, p)
            shares = {
                jid: tuple((f, float(x[m, k])) for k, f in enumerate(p.flavors) if x[m, k] > 0)
                for m, jid in enumerate(p.job_ids)
            }
            state = _RoundState(
                shares=MappingProxyType(shares),
                reset_s=snap.now_s,
                run_at_reset=MappingProxyType({j.job_id: j.run_s_by_flavor for j in snap.jobs}),
                jobs=ids,
            )
        assert state is not None
        return Ranking(self._candidates(ctx, state), state=state, notes=_notes(state))

    def _candidates(self, ctx: PolicyContext, state: _RoundState) -> tuple[tuple[JobId, str], ...]:
        """Gavel's per-flavor priority lists, concatenated in flavor order (vectorised)."""
        snap = ctx.snapshot
        elapsed = max(snap.now_s - state.reset_s, 0.0)
        flavors = self._flavor_order(ctx)
        col = {f: k for k, f in enumerate(flavors)}
        m_count, j_count = len(snap.jobs), len(flavors)
        x = np.zeros((m_count, j_count))
        received = np.zeros((m_count, j_count))
        usable = np.zeros((m_count, j_count), dtype=bool)
        ids: list[JobId] = []
        for m, j in enumerate(snap.jobs):
            jid = j.job_id
            ids.append(jid)
            for r in ctx.oracle.rates(j.spec):
                k = col.get(r.flavor)
                if k is not None:
                    usable[m, k] = True
            for f, share in state.shares.get(jid, ()):
                k = col.get(f)
                if k is not None:
                    x[m, k] = share
            for f, ran in j.run_s_by_flavor:
                k = col.get(f)
                if k is not None:
                    received[m, k] += ran
            for f, ran in state.run_at_reset.get(jid, ()):
                k = col.get(f)
                if k is not None:
                    received[m, k] -= ran
        frac = received / elapsed if elapsed > 0 else np.zeros_like(received)
        with np.errstate(divide="ignore", invalid="ignore"):
            priority = np.where(x <= 0, 0.0, np.where(frac <= 0, x * 1e9, x / frac))
        deficit = x * elapsed - received
        out: list[tuple[JobId, str]] = []
        order_ids = np.arange(m_count)
        for fl, k in col.items():
            rows = order_ids[usable[:, k]]
            # descending (priority, deficit, share); ties keep snapshot order (stable)
            keys = np.lexsort((rows, -x[rows, k], -deficit[rows, k], -priority[rows, k]))
            out.extend((ids[i], fl) for i in rows[keys])
        return tuple(out)

    def _flavor_order(self, ctx: PolicyContext) -> list[str]:
        flavors = list(dict.fromkeys(n.flavor.short for n in ctx.snapshot.up_nodes()))
        if self.agnostic:
            ctx.rng.shuffle(flavors)
            return flavors
        return sorted(flavors, key=lambda f: -resolve_flavor(f).fp32_tflops)


class _ShareNotes(Mapping[JobId, str]):
    """Per-job "target share" explanations, formatted only when someone reads them."""

    def __init__(self, state: _RoundState) -> None:
        self._shares = state.shares

    def __getitem__(self, jid: JobId) -> str:
        sh = self._shares.get(jid)
        if not sh:
            raise KeyError(jid)
        return "target share " + ", ".join(f"{f} {x:.2f}" for f, x in sh)

    def __iter__(self) -> Iterator[JobId]:
        return (jid for jid, sh in self._shares.items() if sh)

    def __len__(self) -> int:
        return sum(1 for sh in self._shares.values() if sh)


def _notes(state: _RoundState) -> Mapping[JobId, str]:
    return _ShareNotes(state)


def _agnostic_share(p: AllocationProblem) -> np.ndarray:
    """Equal time shares: max-min over ``sf/w`` with every usable flavor counted as 1."""
    ones = (p.tput > 0).astype(float)
    a = ones * (p.scale / p.weight)[:, None]
    x, _ = share_lp(p, a, "isolated share LP")
    return x


@POLICIES.register(
    "max_min_fairness", "Gavel LAS: max-min fairness over effective throughput (HiGHS LP)."
)
class MaxMinFairness(GavelAllocationPolicy):
    def allocate(self, ctx: PolicyContext, p: AllocationProblem) -> np.ndarray:
        if self.agnostic:
            return _agnostic_share(p)
        x_iso = _agnostic_share(p)
        norm = (p.tput * x_iso).sum(axis=1)
        norm = np.where(norm > 0, norm, 1.0)
        a = p.tput * (p.scale / (p.weight * norm))[:, None]
        x, _ = share_lp(p, a, "max-min fairness LP")
        return x


class FinishTimeConfig(GavelConfig):
    tolerance: float = Field(1e-3, gt=0, description="relative precision of the ρ bisection")


@POLICIES.register(
    "finish_time_fairness", "Themis finish-time fairness: minimise the worst ρ (LP bisection)."
)
class FinishTimeFairness(GavelAllocationPolicy):
    Config = FinishTimeConfig

    def allocate(self, ctx: PolicyContext, p: AllocationProblem) -> np.ndarray:
        cfg = self.config
        assert isinstance(cfg, FinishTimeConfig)
        x_iso = _agnostic_share(p)
        thr_iso = (p.tput * x_iso).sum(axis=1)
        live = (p.tput.max(axis=1) > 0) & (thr_iso > 0)
        t = np.array([max(ctx.snapshot.now_s - j.spec.submit_time_s, 0.0) for j in p.jobs])
        r = np.array([j.remaining_at(ctx.snapshot.now_s) for j in p.jobs])
        d = np.where(live, t + r / np.where(thr_iso > 0, thr_iso, 1.0), 1.0)

        def need(rho: float) -> np.ndarray | None:
            slack = rho * d - t
            if np.any(live & (slack <= 0)):
                return None
            return np.where(live, r / np.where(slack > 0, slack, 1.0), 0.0)

        def attempt(rho: float) -> np.ndarray | None:
            n = need(rho)
            return None if n is None else feasible_rates(p, n, "finish-time fairness LP")

        hi = 1.0
        best = attempt(hi)
        while best is None:
            hi *= 2.0
            best = attempt(hi)
            if hi > 1e9:
                return x_iso
        lo = float(np.max(np.where(live, t / d, 0.0)))
        while hi - lo > cfg.tolerance * hi:
            mid = 0.5 * (lo + hi)
            x = attempt(mid)
            if x is None:
                lo = mid
            else:
                hi, best = mid, x
        return best


@POLICIES.register("min_makespan", "Minimise makespan: a common progress rate for all (LP).")
class MinMakespan(GavelAllocationPolicy):
    def allocate(self, ctx: PolicyContext, p: AllocationProblem) -> np.ndarray:
        r = np.array([max(j.remaining_at(ctx.snapshot.now_s), 1e-9) for j in p.jobs])
        x, _ = share_lp(p, p.tput / r[:, None], "min-makespan LP")
        return x
