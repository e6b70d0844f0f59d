"""Tessera's Gavel-style allocation policies: shares from an LP, turns from Gavel's mechanism.

Each policy computes time shares ``X[job, flavor]`` with :mod:`tessera.sched.gavel`:

* ``max_min_fairness`` (Gavel LAS): maximise the minimum, over jobs, of
  ``sf_m / w_m · Σ_j T[m,j] X[m,j] / norm_m``, where ``norm_m`` is the throughput the job would
  get from the heterogeneity-agnostic fair share ``X_iso``. The agnostic twin drops the
  throughputs (``T = 1``). Among the allocations that reach the best minimum, an opt-in
  second stage (``settle=ridge``, :mod:`tessera.sched.gavel.maxmin_settle`) keeps the one
  with the most total normalised rate under a small ridge: unique, and moved little by a 1 %
  speed error.
* ``finish_time_fairness`` (Themis ρ): minimise ``max_m ρ_m``,
  ``ρ_m = (t_m + R_m / thr_m(X)) / (t_m + R_m / thr_m(X_iso))``: how much later a job finishes
  than on its isolated fair share (:mod:`tessera.sched.gavel.rho`).
* ``min_makespan``: finish everything as early as possible: maximise a common progress rate
  ``r`` with ``thr_m(X) >= r · R_m``; the makespan is ``1/r``.
* ``max_sum_throughput`` (Gavel's ``max_sum_throughput_perf``): maximise the cluster's total
  steps/s ``Σ_m Σ_j T[m,j] X[m,j]``; efficient, unfair: slow jobs can starve
  (:mod:`tessera.sched.gavel.maxsum`).

Shares are recomputed when the set of jobs changes, but at most once per
``reallocation_interval_s`` (Gavel: 1,920 s); in between, :mod:`tessera.sched.gavel.mechanism`
turns them into a ranking (the job furthest behind its share goes first). The LP solver is the
context's (``PolicyContext.solver``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from types import MappingProxyType
from typing import Literal

import numpy as np
from pydantic import Field

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.policy import Policy, PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView
from tessera.sched.gavel import (
    Backend,
    RhoInputs,
    RhoSearch,
    RoundState,
    ShareProblem,
    Shares,
    max_min_shares,
    max_sum_shares,
    min_max_rho,
    priorities,
)
from tessera.sched.gavel.lp_rows import ShareRows
from tessera.sched.gavel.maxmin_settle import Settle, settled_max_min_shares
from tessera.sched.gavel.mechanism import ShareNotes


class GavelConfig(PolicyConfig):
    reallocation_interval_s: float = Field(
        1920.0, ge=0, description="minimum seconds between recomputing shares (Gavel: 1920)"
    )


def build_problem(ctx: PolicyContext, jobs: Sequence[JobView] | None = None) -> ShareProblem:
    """The matrix for ``jobs`` (default: every active job): policy-visible consolidated rates,
    flavors in the order the up nodes list them."""
    js = tuple(ctx.snapshot.jobs if jobs is None else jobs)
    cap: dict[GpuFlavor, int] = {}
    for n in ctx.snapshot.up_nodes():
        cap[n.flavor] = cap.get(n.flavor, 0) + n.gpus
    flavors = tuple(cap)
    col = {f: i for i, f in enumerate(flavors)}
    tput = np.zeros((len(js), len(flavors)))
    for m, j in enumerate(js):
        for r in ctx.oracle.rates(j.spec):
            if r.flavor in col:
                tput[m, col[r.flavor]] = r.consolidated
    return ShareProblem(
        jobs=tuple(j.job_id for j in js),
        flavors=flavors,
        tput=tput,
        scale=np.array([j.spec.num_gpus for j in js], dtype=float),
        weight=np.array([j.spec.priority_weight for j in js], dtype=float),
        capacity=np.array([cap[f] for f in flavors], dtype=float),
    )


@dataclass(slots=True)
class _RoundMemo:
    """What a Gavel allocation policy keeps between rounds, in the driver's policy caches
    (:meth:`PolicyContext.cache`): the per-job rows, the last shares' notes (read-only,
    formatted on demand) and the flavor order of the up flavors."""

    rows: ShareRows | None = None
    notes: tuple[Shares, ShareNotes] | None = None
    order: tuple[tuple[GpuFlavor, ...], list[GpuFlavor]] | None = None


class GavelAllocationPolicy(Policy):
    """Base for LP policies realised by Gavel's round mechanism."""

    preemptive = True
    round_based = True
    Config = GavelConfig

    @abstractmethod
    def allocate(
        self, ctx: PolicyContext, p: ShareProblem, backend: Backend
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        """The dense ``M × J`` share matrix for ``p``, and any solver fallbacks taken."""

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, GavelConfig)
        snap = ctx.snapshot
        state: RoundState | None = snap.policy_state
        if not snap.jobs:
            return Ranking((), state=state)
        # (the set of jobs is built only once the interval has passed: most rounds it has not)
        ids: frozenset[JobId] | None = None
        stale = state is None or (
            snap.now_s - state.reset_s >= cfg.reallocation_interval_s
            and (ids := frozenset(j.job_id for j in snap.jobs)) != state.jobs
        )
        fallbacks: tuple[str, ...] = ()
        if stale:
            if ids is None:
                ids = frozenset(j.job_id for j in snap.jobs)
            p = build_problem(ctx)
            x, fallbacks = self.allocate(ctx, p, Backend(ctx.lp()))
            state = RoundState(
                shares=Shares(p.jobs, p.flavors, x),
                reset_s=snap.now_s,
                run_at_reset=MappingProxyType({j.job_id: j.run_s_by_flavor for j in snap.jobs}),
                jobs=ids,
            )
        assert state is not None
        memo: _RoundMemo = ctx.cache(self, "gavel_round", _RoundMemo)
        notes = memo.notes
        if notes is None or notes[0] is not state.shares:
            notes = memo.notes = (state.shares, ShareNotes(state.shares))
        return Ranking(self._candidates(ctx, state), state=state, notes=notes[1],
                       fallbacks=fallbacks)

    def _candidates(
        self, ctx: PolicyContext, state: RoundState
    ) -> tuple[tuple[JobId, GpuFlavor], ...]:
        """Per-flavor priority lists, concatenated in flavor order.

        A job's share and its time run at the reset are fixed until the next reallocation,
        and which flavors it can use is fixed for its spec, so both are kept per job
        (:class:`~tessera.sched.gavel.lp_rows.ShareRows`) and a round gathers them with one
        index per job -- or, when the jobs and the flavor order are the last round's, takes the
        last gathering as it is (:meth:`~tessera.sched.gavel.lp_rows.ShareRows.gather`); only
        the time each job has run is read anew.
        """
        snap = ctx.snapshot
        elapsed = max(snap.now_s - state.reset_s, 0.0)
        flavors = self._flavor_order(ctx)
        memo: _RoundMemo = ctx.cache(self, "gavel_round", _RoundMemo)
        rows = memo.rows
        if rows is None or not rows.serves(state, ctx.oracle, flavors):
            rows = memo.rows = ShareRows.of(state, ctx.oracle, flavors, rows)
        col = rows.col
        jobs = snap.jobs
        n = len(jobs)
        got = rows.gather([j.spec for j in jobs], rows.perm(flavors), ctx.oracle)
        ids, x, usable = got.ids, got.x, got.usable
        # Each job's time run per flavor, gathered in C: (flavor, seconds) pairs of all jobs
        # in order, and the job each pair belongs to.
        runs = [j.run_s_by_flavor for j in jobs]
        received = np.zeros((n, len(col)))
        pairs = list(chain.from_iterable(runs))
        if pairs:
            names, ran = zip(*pairs, strict=True)
            at = np.repeat(np.arange(n), np.fromiter(map(len, runs), dtype=np.intp, count=n))
            ks = np.fromiter(map(col.get, names, repeat(-1, len(names))), dtype=np.intp,
                             count=len(names))
            known = ks >= 0
            np.add.at(received, (at[known], ks[known]), np.array(ran)[known])
        received = (received - got.at_reset)[:, got.perm]
        frac = received / elapsed if elapsed > 0 else np.zeros_like(received)
        prio = priorities(x, frac, np.ones_like(usable))
        deficit = x * elapsed - received
        out: list[tuple[JobId, GpuFlavor]] = []
        for k, fl in enumerate(flavors):
            listed, neg_share = got.lists[k]
            keys = np.lexsort((listed, neg_share, -deficit[listed, k], -prio[listed, k]))
            out += zip(map(ids.__getitem__, listed[keys].tolist()), repeat(fl))
        return tuple(out)

    def _flavor_order(self, ctx: PolicyContext) -> list[GpuFlavor]:
        """The round's flavor order: fastest first (kept while the up flavors are the same),
        or shuffled by the round's ``rng`` for the agnostic twin."""
        present = ctx.snapshot.up_flavors()
        if self.agnostic:
            flavors = list(present)
            ctx.rng.shuffle(flavors)
            return flavors
        memo: _RoundMemo = ctx.cache(self, "gavel_round", _RoundMemo)
        kept = memo.order
        if kept is None or kept[0] != present:
            kept = memo.order = (
                present, sorted(present, key=lambda f: -f.fp32_tflops))
        return kept[1]


def _agnostic_share(p: ShareProblem, backend: Backend) -> tuple[np.ndarray, tuple[str, ...]]:
    """Equal time shares: max-min over ``sf/w`` with every usable flavor counted as 1."""
    ones = (p.tput > 0).astype(float)
    s = max_min_shares(p, ones * (p.scale / p.weight)[:, None], backend, "isolated share LP")
    assert s.x is not None
    return s.x, s.fallbacks


class MaxMinConfig(GavelConfig):
    """Max-min fairness settings: which allocation to keep among those of (nearly) the best
    minimum (:mod:`tessera.sched.gavel.maxmin_settle`)."""

    settle: Literal["ridge", "throughput", "none"] = Field(
        "none", description="second stage among allocations within settle_slack of the best "
        "minimum: ridge (most total normalised throughput, with diminishing returns per job "
        "and flavor: unique and stable under small speed errors), throughput (the same, a "
        "plain LP: a vertex) or none (the max-min LP's vertex, the policy before the second "
        "stage, the default: docs/scheduler.md says why)")
    settle_slack: float = Field(0.0, ge=0, lt=1, description="fraction of the best minimum "
                                "normalised rate the second stage may give up")
    settle_ridge: float = Field(0.1, gt=0, allow_inf_nan=False,
                                description="weight of the ridge stage's diminishing returns")


class MaxMinFairness(GavelAllocationPolicy):
    Config = MaxMinConfig

    def allocate(
        self, ctx: PolicyContext, p: ShareProblem, backend: Backend
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        x_iso, notes = _agnostic_share(p, backend)
        if self.agnostic:
            return x_iso, notes
        norm = (p.tput * x_iso).sum(axis=1)
        norm = np.where(norm > 0, norm, 1.0)
        a = p.tput * (p.scale / (p.weight * norm))[:, None]
        cfg = self.config
        assert isinstance(cfg, MaxMinConfig)
        settle = None if cfg.settle == "none" else Settle(
            slack=cfg.settle_slack,
            ridge=cfg.settle_ridge if cfg.settle == "ridge" else 0.0)
        s = settled_max_min_shares(p, a, backend, settle, "max-min fairness LP")
        assert s.x is not None
        return s.x, notes + s.fallbacks


class FinishTimeConfig(GavelConfig):
    """Finish-time fairness settings.

    The bisection finds the smallest worst ρ every job can reach; many allocations reach it.
    ``settle`` chooses among them with one more LP at that ρ (every job still meets it):

    * ``progress`` (default) -- maximise ``Σ thr_m / R_m``, the rate at which jobs' remaining
      work shrinks: capacity above the fairness floor goes where it finishes work soonest;
    * ``throughput`` -- maximise ``Σ thr_m / thr_iso_m``, work done in units of each job's
      isolated share (the shortest makespan);
    * ``none`` -- keep the search's last feasible vertex, whichever one the solver's path
      reached (the policy's behaviour before ``settle``; cold and warm searches then differ).

    On the first 1,200 jobs of the Philly week on ``gavel-108``: average JCT 23.44 h (none,
    cold) → 19.13 h (progress, cold) / 19.30 h (progress, warm) / 21.73 h (throughput, warm);
    makespan 910 → 915 / 912 / 797 h.
    """

    tolerance: float = Field(1e-3, gt=0, description="relative precision of the ρ bisection")
    warm_start: bool = Field(
        True, description="search ρ with the model kept loaded in the solver (warm probes, a "
        "class lower bound, a crash start): about 7x faster per round at 2,048 jobs; with "
        "settle it reaches the same allocations as the cold search up to the bisection's "
        "tolerance (average JCT within 1 % in the runs measured)")
    settle: Literal["progress", "throughput", "none"] = Field(
        "progress", description="which allocation to return among those reaching the best ρ: "
        "progress (Σ thr/remaining), throughput (Σ thr/isolated thr) or none (the "
        "solver's vertex)")


class FinishTimeFairness(GavelAllocationPolicy):
    Config = FinishTimeConfig
    oracle = "each job's true remaining work (for its finish time alone), taken from the trace"

    def allocate(
        self, ctx: PolicyContext, p: ShareProblem, backend: Backend
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        cfg = self.config
        assert isinstance(cfg, FinishTimeConfig)
        now = ctx.snapshot.now_s
        views = ctx.snapshot.jobs
        x_iso, notes = _agnostic_share(p, backend)
        thr_iso = (p.tput * x_iso).sum(axis=1)
        live = (p.tput.max(axis=1) > 0) & (thr_iso > 0)
        t = np.array([max(now - j.spec.submit_time_s, 0.0) for j in views])
        r = np.array([j.remaining_at(now) for j in views])
        d = np.where(live, t + r / np.where(thr_iso > 0, thr_iso, 1.0), 1.0)
        inputs = RhoInputs(since_s=t, remaining=r, isolated_s=d, live=live)
        # Probe ρ = 1 rather than passing X_iso as known-feasible: when the optimum is ~1 the
        # LP's vertex, not the equal split, is what we return, and that choice moved the Gavel
        # week's average JCT by 8 % (the vertex puts jobs on their fast flavors).
        weight = None
        if cfg.settle == "progress":
            weight = np.where(live, 1.0 / np.maximum(r, 1e-9), 0.0)
        elif cfg.settle == "throughput":
            weight = np.where(live, 1.0 / np.where(thr_iso > 0, thr_iso, 1.0), 0.0)
        found = min_max_rho(p, inputs, backend,
                            RhoSearch(tolerance=cfg.tolerance, warm_start=cfg.warm_start),
                            settle=weight)
        if found.x is None:
            return x_iso, notes + found.fallbacks + (
                "finish-time fairness: no ρ found; used the isolated (equal) share",)
        return found.x, notes + found.fallbacks


class MinMakespan(GavelAllocationPolicy):
    oracle = "each job's true remaining work, taken from the trace"

    def allocate(
        self, ctx: PolicyContext, p: ShareProblem, backend: Backend
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        now = ctx.snapshot.now_s
        r = np.array([max(j.remaining_at(now), 1e-9) for j in ctx.snapshot.jobs])
        s = max_min_shares(p, p.tput / r[:, None], backend, "min-makespan LP")
        assert s.x is not None
        return s.x, s.fallbacks


class MaxSumThroughput(GavelAllocationPolicy):
    """Gavel's ``max_sum_throughput_perf``: shares that maximise ``Σ_m Σ_j T[m,j] X[m,j]``.

    What it optimises: the whole cluster's steps per second, with every job's steps counted
    alike (no gang size, weight or reference throughput in the objective). GPUs go to the jobs
    that add the most steps/s per GPU, all flavors weighed at once: a job lands where its
    advantage is largest, not simply on its fastest flavor (two jobs at 3 and 1 steps/s on a
    fast and a slow GPU, and at 2 and 1.5: the first takes the fast GPU, 3 + 1.5 > 2 + 1). The
    round mechanism then gives every job turns in proportion to its share, fastest flavor's
    list first.

    Known weakness (Gavel presents it as an efficiency policy, not a fair one): a job that is
    slow on every flavor, or a gang whose throughput grows less than its size, gets a zero share
    while faster-stepping jobs fill the cluster, and only runs on GPUs left over; its JCT can
    grow without bound under load. It is the Gavel baseline Sia's artifact runs
    (``gavel_default_policy``); ``max_min_fairness`` is the fair one.

    The ``-agnostic`` twin sees every usable flavor at the reference speed: it still favours
    jobs with many steps/s at that speed but cannot tell flavors apart. Gavel has no such
    policy.
    """

    def allocate(
        self, ctx: PolicyContext, p: ShareProblem, backend: Backend
    ) -> tuple[np.ndarray, tuple[str, ...]]:
        s = max_sum_shares(p, backend)
        assert s.x is not None
        return s.x, s.fallbacks
