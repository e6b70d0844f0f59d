"""Gavel's scheduler mechanism and policy math, reproduced for ``--compat gavel`` runs.

Our own ``fifo``, ``max_min_fairness`` and ``finish_time_fairness`` are *inspired* by Gavel; this
module is Gavel (``scheduler/scheduler.py`` @ c4fa400 and its policies), re-implemented from
``docs/gavel-mechanism.md`` so that the same trace gives the same average JCT. It plugs into the
one decision core: a compat policy's :meth:`~GavelCompatPolicy.rank` does Gavel's bookkeeping and
its greedy per-type selection, and returns exactly the ``(job, flavor)`` pairs Gavel would run
this round; :func:`tessera.sched.core.decide.decide` then places them (all fit by construction).

The simulator swaps a policy for its compat twin with :func:`gavel_compat_policy` and, at each
round boundary, reports what happened with :func:`gavel_boundary` (time credited per micro-task,
"an event happened", "queue drained and nothing ran"). The round mechanism shared by every
policy is in :mod:`tessera.sched.gavel.compat_mechanism`; this module holds the three
policies' share computations and the twin lookup. What is reproduced (see
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
  the capacity-weighted mean throughput; agnostic: every throughput 1),
  ``finish_time_fairness`` (ρ against the 1/N isolated share, with Gavel's cumulative isolated
  time ``C``; agnostic: the V100 throughput copied to every flavor) and
  ``max_sum_throughput`` (``max_sum_throughput_perf``; Gavel has no agnostic one).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.policy import Policy
from tessera.sched.core.snapshot import JobView
from tessera.sched.gavel import (
    Backend,
    FifoMemory,
    FtfMemory,
    GavelState,
    RhoInputs,
    RhoSearch,
    ShareProblem,
    SolverName,
    max_min_shares,
    max_sum_shares,
    min_max_rho,
)
from tessera.sched.gavel.compat_mechanism import (
    RESET_INTERVAL_S,
    GavelCompatConfig,
    GavelCompatPolicy,
    gavel_boundary,
    gavel_type,
)
from tessera.sched.gavel.packed_policy import GavelPackedPolicy

__all__ = ["GavelState", "gavel_boundary", "gavel_compat_policy", "has_gavel_twin"]

#: Gavel's ρ bisection settings on HiGHS: cold probes, 1e-7, a last solve with the method.
GAVEL_RHO = RhoSearch(tolerance=1e-7, start_hi=None, give_up_hi=1e12, warm_start=False,
                      polish=True, gavel_form=True)


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

        def tput(jid: JobId, f: GpuFlavor) -> float:
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
        # Gavel's operation order, so that ECOS sees the same bits (ProportionalPolicy's 1/m
        # slices rescaled by the largest row sum; then T · (1/w · 1/P) · sf).
        m = len(p.jobs)
        x_prop = np.tile(p.capacity / m, (m, 1))
        x_prop = x_prop / x_prop.sum(axis=1).max()
        prop = np.sum(t * x_prop, axis=1)
        prop = np.where(prop > 0, prop, np.inf)
        coef = (t * ((1.0 / p.weight) * (1.0 / prop))[:, None]) * p.scale[:, None]
        s = max_min_shares(p, coef, backend, "Gavel max-min fairness LP", gavel_form=True)
        assert s.x is not None
        return s.x, memory, s.fallbacks


class GavelFinishTimeFairness(GavelCompatPolicy):
    """``finish_time_fairness_perf`` (aware); agnostic: V100 throughput copied to every type."""

    oracle = "each job's true remaining work (for its finish time alone), taken from the trace"

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


class GavelMaxSumThroughput(GavelCompatPolicy):
    """``max_sum_throughput_perf``: ``max Σ T·X`` on Gavel's exact LP (every pair a variable).

    Gavel builds it as the cost-normalised policy with no instance costs, so its name carries
    "Perf" (no type shuffle) and its shares are the solver's point on a usually degenerate
    optimum: ECOS' near-centre one under ``solver=ecos``.
    """

    def allocate(
        self, p: ShareProblem, views: Sequence[JobView], now_s: float, memory: Any,
        backend: Backend,
    ) -> tuple[np.ndarray, Any, tuple[str, ...]]:
        if not p.jobs:
            return np.zeros(p.shape), memory, ()
        s = max_sum_shares(p, backend, "Gavel max-sum throughput LP", gavel_form=True)
        assert s.x is not None
        return s.x, memory, s.fallbacks


_COMPAT: dict[str, type[GavelCompatPolicy]] = {
    "fifo": GavelFifo,
    "max_min_fairness": GavelMaxMinFairness,
    "finish_time_fairness": GavelFinishTimeFairness,
    "max_sum_throughput": GavelMaxSumThroughput,
}
#: Twins Gavel only has heterogeneity-aware: their ``-agnostic`` name keeps our policy.
_AWARE_ONLY = frozenset({"max_sum_throughput"})


#: Registered policies that are Gavel's own (no Tessera version): ``--compat gavel`` only.
GAVEL_ONLY = frozenset({"max_min_fairness_packed", "fifo_packed", "gandiva",
                        "min_total_duration", "allox"})


def has_gavel_twin(name: str) -> bool:
    """Whether ``name`` (without ``-agnostic``) has a Gavel-compat twin (``max_sum_throughput``
    has one for its aware form only)."""
    return name in _COMPAT


def gavel_compat_policy(policy: Policy, seed: int = 0, solver: SolverName = "auto") -> Policy:
    """The Gavel-compat twin of ``policy`` (same name and agnostic flag), or ``policy`` itself
    when Gavel has no such policy (it then only gets Gavel's round timing from the simulator).

    ``fifo-agnostic`` is Gavel's ``fifo``, ``fifo`` is ``fifo_perf``; likewise
    ``max_min_fairness[-agnostic]`` and ``finish_time_fairness[-agnostic]``;
    ``max_sum_throughput`` is ``max_sum_throughput_perf`` (its agnostic name keeps our policy).
    """
    if policy.name in GAVEL_ONLY and isinstance(policy, (GavelCompatPolicy, GavelPackedPolicy)):
        # A policy that exists only as Gavel's: run it with the run's seed and solver.
        reset = policy.config.reset_interval_s  # type: ignore[attr-defined]
        own = GavelCompatConfig(seed=seed, solver=solver, reset_interval_s=reset)
        return type(policy)(own, agnostic=policy.agnostic, name=policy.name)
    if isinstance(policy, GavelCompatPolicy):
        return policy
    cls = _COMPAT.get(policy.name)
    if cls is None or (policy.agnostic and policy.name in _AWARE_ONLY):
        return policy
    reset = getattr(policy.config, "reallocation_interval_s", RESET_INTERVAL_S)
    cfg = GavelCompatConfig(seed=seed, solver=solver, reset_interval_s=reset)
    return cls(cfg, agnostic=policy.agnostic, name=policy.name)
