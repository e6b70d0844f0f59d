"""Gavel's scheduler mechanism and policy math, reproduced for ``--compat gavel`` runs.

Our own ``fifo``, ``max_min_fairness`` and ``finish_time_fairness`` are *inspired* by Gavel; this
module is Gavel (``scheduler/scheduler.py`` @ c4fa400 and its policies), re-implemented from
``docs/gavel-mechanism.md`` so that the same trace gives the same average JCT. It plugs into the
one decision core: a compat policy's :meth:`~GavelCompatPolicy.rank` does Gavel's bookkeeping and
its greedy per-type selection, and returns exactly the ``(job, flavor)`` pairs Gavel would run
this round; :func:`tessera.sched.core.decide` then places them (all fit by construction).

The simulator swaps a policy for its compat twin with :func:`gavel_compat_policy` and, at each
round boundary, reports what happened with :func:`gavel_boundary` (time credited per micro-task,
"an event happened", "queue drained and nothing ran"). What is reproduced (see
``docs/gavel-compat.md`` for the full list and the reasons):

* **allocation gate** -- shares are recomputed only when an arrival, completion or failed
  micro-task happened since the last recompute *and* ``>= 1920 s`` passed since the last reset
  (or the last reset was at time 0); jobs that arrived since have no share and cannot run;
* **reset bookkeeping** -- at a reset, deficits accumulate ``X·elapsed − (time − 180 s)``
  (never zeroed), every job's time restarts at the 180 s seed, each flavor's total at
  ``180 × jobs``;
* **priorities** ``X / (job time / flavor time)`` (``X·1e9`` if the flavor time is 0; 0 when
  ``X`` or the throughput is 0, or the job has no share);
* **selection** -- one list per flavor sorted by ``(priority, deficit, share)`` descending
  (stable: ties keep ascending job id), lists concatenated in flavor order (``v100, p100,
  k80`` for heterogeneity-aware policies; shuffled each round with ``random.Random(seed+5)`` for
  the agnostic ones), then one greedy pass; FIFO refuses priority-0 entries; a picked job
  without a share keeps its GPUs idle;
* **policies** -- ``fifo`` (agnostic: Gavel's base mode with its type-selection bug and its
  ``random.Random(seed)`` stream; aware: ``fifo_perf``), ``max_min_fairness`` (normalised by
  the capacity-weighted mean throughput; agnostic: every throughput 1) and
  ``finish_time_fairness`` (ρ against the 1/N isolated share, with Gavel's cumulative isolated
  time ``C``; agnostic: the V100 throughput copied to every flavor).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobId
from tessera.sched.gavel import (
    Backend,
    FifoMemory,
    FtfMemory,
    GavelState,
    JobAccount,
    RhoInputs,
    RhoSearch,
    ShareProblem,
    Shares,
    SolverName,
    credit_round,
    max_min_shares,
    min_max_rho,
    priorities,
    ranked_entries,
    resolve_solver,
)
from tessera.sched.policy import Policy, PolicyConfig, PolicyContext, Ranking
from tessera.sched.snapshot import JobView

__all__ = ["GavelState", "gavel_boundary", "gavel_compat_policy", "has_gavel_twin"]

#: Gavel's round (``--time_per_iteration``); jobs are seeded with half of it per flavor.
ROUND_S = 360.0
#: Gavel's ``minimum_time_between_allocation_resets``.
RESET_INTERVAL_S = 1920.0
#: Gavel's worker-type order for heterogeneity-aware policies.
PERF_ORDER = ("v100", "p100", "k80")
#: Our flavor behind each of Gavel's worker types (``V100-16GB`` for ``v100``).
_GAVEL_TYPE_OF = {resolve_flavor(name).short: name for name in PERF_ORDER}
#: Gavel's ρ bisection settings on HiGHS: cold probes, 1e-7, a last solve with the method.
GAVEL_RHO = RhoSearch(tolerance=1e-7, start_hi=None, give_up_hi=1e12, warm_start=False,
                      polish=True, gavel_form=True)


def gavel_type(flavor_short: str) -> str:
    """Gavel's worker-type name for one of our flavors (``V100-16GB`` → ``v100``)."""
    return _GAVEL_TYPE_OF.get(flavor_short, flavor_short.lower())


class GavelCompatConfig(PolicyConfig):
    seed: int = Field(0, description="Gavel's --seed (FIFO RNG: seed; type shuffler: seed+5)")
    solver: SolverName = Field("auto", description="ecos | highs | highs-ipm | auto")
    round_s: float = Field(ROUND_S, gt=0, description="Gavel's --time_per_iteration")
    reset_interval_s: float = Field(RESET_INTERVAL_S, ge=0)


def gavel_boundary(
    state: Any,
    credits: Sequence[tuple[JobId, str, float]],
    event: bool,
    drained: bool,
) -> Any:
    """What the simulator reports at a round boundary, before it asks for the next round.

    Args:
        state: the policy state returned last round (left alone unless it is a
            :class:`~tessera.sched.gavel.GavelState`).
        credits: ``(job, flavor, execution_s)`` per successful micro-task of the round that just
            ended, completed jobs included (Gavel's ``_done_callback`` adds the time before it
            removes the job).
        event: an arrival, completion or failed micro-task happened at this boundary.
        drained: no arrivals are left and nothing ran last round (Gavel then sets
            ``_last_reset_time = 0``, forcing a recompute).
    """
    if not isinstance(state, GavelState):
        return state
    return credit_round(state, credits, event, drained)


class GavelCompatPolicy(Policy):
    """Gavel's round mechanism around one of its policies; subclasses compute the shares."""

    preemptive = True
    round_based = True
    Config = GavelCompatConfig
    #: Gavel refuses priority-0 entries for policies whose name starts with "FIFO".
    refuses_zero_priority: ClassVar[bool] = False
    #: Whether :meth:`allocate` solves an optimisation (FIFO does not).
    uses_solver: ClassVar[bool] = True

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        """Gavel's ``_compute_allocation``: ``(X, new memory, fallbacks)`` for the jobs of
        ``p`` (``views`` in the same order)."""
        raise NotImplementedError

    # -- the mechanism ------------------------------------------------------------------------

    def _cfg(self) -> GavelCompatConfig:
        cfg = self.config
        assert isinstance(cfg, GavelCompatConfig)
        return cfg

    def _initial(self) -> GavelState:
        cfg = self._cfg()
        return GavelState(
            flavors=(), accounts={}, worker_time_s=(), shares=None, last_reset_s=0.0,
            need_update=True, shuffle_rng=random.Random(cfg.seed + 5).getstate(),
        )

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self._cfg()
        snap = ctx.snapshot
        st = snap.policy_state if isinstance(snap.policy_state, GavelState) else self._initial()
        now = snap.now_s
        half = cfg.round_s / 2.0
        cap: dict[str, int] = {}
        for node in snap.up_nodes():
            cap[node.flavor.short] = cap.get(node.flavor.short, 0) + node.gpus
        flavors = tuple(cap)
        jobs = snap.jobs
        ids = tuple(j.job_id for j in jobs)
        thr_maps = [_real_rates(ctx, j) for j in jobs]
        thr = np.array([[t.get(f, 0.0) for f in flavors] for t in thr_maps]).reshape(
            len(ids), len(flavors))

        # Membership: new jobs get the 180 s seed and zero deficits; finished ones vanish.
        job_time, deficit, worker_time = st.arrays(ids, flavors, half)
        need_update = st.need_update or ids != st.known
        shares, memory, last_reset = st.shares, st.memory, st.last_reset_s
        fallbacks: tuple[str, ...] = ()

        # _update_priorities: the gated reset and recompute.
        elapsed = now - last_reset
        if need_update and (elapsed >= cfg.reset_interval_s or last_reset == 0):
            old = shares.aligned(ids, flavors)[0] if shares is not None else np.zeros_like(thr)
            received = np.where(np.isnan(job_time), half, job_time) - half
            deficit = deficit + (old * elapsed - received)
            job_time = np.full_like(job_time, half)
            seeded = 0.0
            for _ in ids:
                seeded += half
            worker_time = np.full(len(flavors), seeded)
            last_reset = now
            p = _problem(jobs, flavors, cap, thr_maps)
            backend = (Backend(ctx.lp(), resolve_solver(cfg.solver)) if self.uses_solver
                       else Backend(ctx.lp()))
            x, memory, fallbacks = self.allocate(p, jobs, now, memory, backend)
            shares = Shares(p.jobs, p.flavors, x)
            need_update = False

        # Priorities: share / (job time / flavor time).
        a = shares.aligned(ids, flavors)[0] if shares is not None else np.zeros_like(thr)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(worker_time == 0.0, 0.0, np.nan_to_num(job_time) / worker_time)
        prio = priorities(a, frac, thr != 0.0)

        # Type order (a fresh shuffle every call for the agnostic policies).
        order = _perf_order([snap.cluster.flavor(f) for f in flavors])
        shuffler = random.Random()
        shuffler.setstate(st.shuffle_rng)
        if self.agnostic:
            shuffler.shuffle(order)

        # _schedule_jobs_on_workers_helper: one greedy pass over the concatenated lists.
        col = {f: k for k, f in enumerate(flavors)}
        queue = ranked_entries(prio, deficit, a, np.ones(a.shape, dtype=bool),
                               [col[f] for f in order])
        left = [cap[f] for f in flavors]
        scale = [j.spec.num_gpus for j in jobs]
        picked: list[tuple[int, int]] = []
        chosen: set[int] = set()
        for m, k in queue:
            if left[k] == 0 or m in chosen or thr[m, k] <= 0:
                continue
            if self.refuses_zero_priority and prio[m, k] <= 0.0:
                continue
            if scale[m] > left[k]:
                continue
            left[k] -= scale[m]
            chosen.add(m)
            picked.append((m, k))
        # A picked job without a share is not given workers: its GPUs idle this round.
        run = [(ids[m], flavors[k]) for m, k in picked if shares is not None and ids[m] in shares]
        gang = {jid: scale[m] for m, jid in enumerate(ids)}
        run.sort(key=lambda c: -gang[c[0]])

        new_state = GavelState(
            flavors=flavors,
            accounts={jid: JobAccount(tuple(job_time[i].tolist()), tuple(deficit[i].tolist()))
                      for i, jid in enumerate(ids)},
            worker_time_s=tuple(worker_time.tolist()), shares=shares, last_reset_s=last_reset,
            need_update=need_update, shuffle_rng=shuffler.getstate(), memory=memory,
        )
        return Ranking(tuple(run), state=new_state, notes=_notes(shares, ids),
                       fallbacks=fallbacks)


def _notes(shares: Shares | None, ids: Sequence[JobId]) -> dict[JobId, str]:
    notes: dict[JobId, str] = {}
    if shares is None or not shares.jobs:
        return notes
    for jid in ids:
        sh = shares.of(jid)
        if sh:
            notes[jid] = "Gavel share " + ", ".join(
                f"{gavel_type(f)} {x:.2f}" for f, x in sh.items() if x > 1e-6
            )
    return notes


def _real_rates(ctx: PolicyContext, j: JobView) -> dict[str, float]:
    """Gavel's ``_throughputs``: the isolated, consolidated rate on every flavor (0 if none)."""
    return {r.flavor: r.consolidated for r in ctx.oracle.real_rates(j.spec)}


def _perf_order(flavors: Sequence[GpuFlavor]) -> list[str]:
    """``v100, p100, k80`` (those present), then any other flavor, fastest first (short names)."""
    by_name = {gavel_type(f.short): f.short for f in flavors}
    order = [by_name[n] for n in PERF_ORDER if n in by_name]
    rest = sorted((f for f in flavors if f.short not in order), key=lambda f: -f.fp32_tflops)
    return order + [f.short for f in rest]


def _problem(
    jobs: Sequence[JobView],
    flavors: Sequence[str],
    cap: Mapping[str, int],
    thr: Sequence[Mapping[str, float]],
) -> ShareProblem:
    """Gavel's order: jobs by id (the snapshot's), flavors alphabetical by Gavel's names."""
    cols = tuple(sorted(flavors, key=gavel_type))
    return ShareProblem(
        jobs=tuple(j.job_id for j in jobs),
        flavors=cols,
        tput=np.array([[t.get(f, 0.0) for f in cols] for t in thr],
                      dtype=float).reshape(len(jobs), len(cols)),
        scale=np.array([j.spec.num_gpus for j in jobs], dtype=float),
        weight=np.array([j.spec.priority_weight for j in jobs], dtype=float),
        capacity=np.array([cap[f] for f in cols], dtype=float),
    )


# -- the policies -------------------------------------------------------------------------------


class GavelFifo(GavelCompatPolicy):
    """``fifo`` (agnostic twin: Gavel's base mode) and ``fifo_perf`` (aware)."""

    refuses_zero_priority = True
    uses_solver = False

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        base = self.agnostic
        rng = random.Random()
        if isinstance(memory, FifoMemory):
            rng.setstate(memory.rng)
            assigned = dict(memory.assigned) if base else {}
        else:
            rng.seed(self._cfg().seed)
            assigned = {}
        names = {f: gavel_type(f) for f in p.flavors}
        available = {f: int(c) for f, c in zip(p.flavors, p.capacity, strict=True)}
        row = {jid: i for i, jid in enumerate(p.jobs)}
        sf = {j.job_id: j.spec.num_gpus for j in views}

        def tput(jid: JobId, f: str) -> float:
            return float(p.tput[row[jid], p.flavors.index(f)])

        queue = [jid for jid in p.jobs if jid not in assigned]
        # Completed jobs hand their type to the queue head if it fits there (peek, not pop).
        for jid in sorted(assigned, key=_id_key):
            f = assigned[jid]
            if jid not in row:
                if queue:
                    head = queue[0]
                    if sf[head] <= available[f] and tput(head, f) > 0.0:
                        queue.pop(0)
                        assigned[head] = f
                        available[f] -= sf[head]
                del assigned[jid]
            else:
                available[f] -= sf[jid]
        types = sorted((f for f in p.flavors if available[f] > 0), key=lambda f: names[f])
        while queue and types:
            jid = queue.pop(0)
            s = sf[jid]
            cands = [(i, f) for i, f in enumerate(types) if available[f] >= s]
            if not cands:
                break
            if base:
                idx = rng.randrange(len(cands))
                chosen = types[-1]  # Gavel's bug: the loop variable, never cands[idx]
            else:
                idx, chosen, best = 0, cands[0][1], -1.0
                for k, (_i, f) in enumerate(cands):
                    if tput(jid, f) > best:
                        best, idx, chosen = tput(jid, f), k, f
            if tput(jid, chosen) > 0.0:
                assigned[jid] = chosen
                available[chosen] -= s
                if available[chosen] == 0:
                    types.pop(cands[idx][0])
        x = np.array([[1.0 if assigned.get(jid) == f else 0.0 for f in p.flavors]
                      for jid in p.jobs]).reshape(p.shape)
        return x, FifoMemory(assigned, rng.getstate()), ()


def _id_key(jid: JobId) -> tuple[int, int | str]:
    s = str(jid)
    return (0, int(s)) if s.isdigit() else (1, s)


class GavelMaxMinFairness(GavelCompatPolicy):
    """``max_min_fairness_perf`` (aware) and ``max_min_fairness`` (agnostic: throughputs 1)."""

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        if not p.jobs:
            return np.zeros(p.shape), memory, ()
        t = np.ones_like(p.tput) if self.agnostic else p.tput
        share = p.capacity / p.capacity.sum()
        prop = t @ share
        prop = np.where(prop > 0, prop, np.inf)
        coef = t * (p.scale / (p.weight * prop))[:, None]
        s = max_min_shares(p, coef, backend, "Gavel max-min fairness LP", gavel_form=True)
        assert s.x is not None
        return s.x, memory, s.fallbacks


class GavelFinishTimeFairness(GavelCompatPolicy):
    """``finish_time_fairness_perf`` (aware); agnostic: V100 throughput copied to every type."""

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        mem = memory if isinstance(memory, FtfMemory) else FtfMemory({}, {}, {})
        if not p.jobs:
            return np.zeros(p.shape), FtfMemory(dict(mem.cumulative), {}, {}), ()
        t_mat = p.tput
        if self.agnostic:
            names = [gavel_type(f) for f in p.flavors]
            ref = names.index("v100") if "v100" in names else int(np.argmax(p.tput.sum(axis=0)))
            t_mat = np.repeat(p.tput[:, ref : ref + 1], len(p.flavors), axis=1)
        m = len(p.jobs)
        x_iso = (p.capacity[None, :] / m) / p.scale[:, None]
        x_iso = x_iso / np.maximum(x_iso.sum(axis=1), 1.0)[:, None]
        iso = (t_mat * x_iso).sum(axis=1)
        ids = p.jobs
        remaining = np.array([j.remaining_steps for j in views], dtype=float)
        since = np.array([now_s - j.spec.submit_time_s for j in views], dtype=float)
        cumulative = dict(mem.cumulative)
        for i, jid in enumerate(ids):
            c = cumulative.get(jid, 0.0)
            if jid in mem.remaining_prev and mem.iso_prev.get(jid, 0.0) > 0:
                c += (mem.remaining_prev[jid] - remaining[i]) / mem.iso_prev[jid]
            cumulative[jid] = c
        c_arr = np.array([cumulative[jid] for jid in ids])
        denom = c_arr + remaining / np.where(iso > 0, iso, math.inf)
        denom = np.where(denom > 0, denom, 1.0)
        inputs = RhoInputs(since, remaining, denom, np.ones(m, dtype=bool))
        problem = ShareProblem(p.jobs, p.flavors, t_mat, p.scale, p.weight, p.capacity)
        found = min_max_rho(problem, inputs, backend, GAVEL_RHO,
                            what="Gavel finish-time fairness LP")
        fallbacks = found.fallbacks
        x = found.x
        if x is None:  # Gavel: "if x.value is None", the isolated allocation
            x = x_iso
            fallbacks += ("Gavel finish-time fairness: no solution; used the isolated share",)
        new_mem = FtfMemory(
            cumulative,
            {jid: float(remaining[i]) for i, jid in enumerate(ids)},
            {jid: float(iso[i]) for i, jid in enumerate(ids)},
        )
        return x, new_mem, fallbacks


_COMPAT: dict[str, type[GavelCompatPolicy]] = {
    "fifo": GavelFifo,
    "max_min_fairness": GavelMaxMinFairness,
    "finish_time_fairness": GavelFinishTimeFairness,
}


def has_gavel_twin(name: str) -> bool:
    """Whether ``name`` (without ``-agnostic``) has a Gavel-compat twin."""
    return name in _COMPAT


def gavel_compat_policy(policy: Policy, seed: int = 0, solver: SolverName = "auto") -> Policy:
    """The Gavel-compat twin of ``policy`` (same name and agnostic flag), or ``policy`` itself
    when Gavel has no such policy (it then only gets Gavel's round timing from the simulator).

    ``fifo-agnostic`` is Gavel's ``fifo``, ``fifo`` is ``fifo_perf``; likewise
    ``max_min_fairness[-agnostic]`` and ``finish_time_fairness[-agnostic]``.
    """
    if isinstance(policy, GavelCompatPolicy):
        return policy
    cls = _COMPAT.get(policy.name)
    if cls is None:
        return policy
    reset = getattr(policy.config, "reallocation_interval_s", RESET_INTERVAL_S)
    cfg = GavelCompatConfig(seed=seed, solver=solver, reset_interval_s=reset)
    return cls(cfg, agnostic=policy.agnostic, name=policy.name)
