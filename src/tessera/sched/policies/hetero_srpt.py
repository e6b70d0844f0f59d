"""Heterogeneity-aware SRPT with flavor matching and gang defragmentation (Tessera's JCT policy).

Three ideas, each measured on the Philly week (``benchmarks/bench_policies.py``):

**1. Who runs: shortest remaining work first, per GPU.** A job's priority is
``1 / (τ_m · g_m)``, where ``τ_m`` is its remaining time on its fastest usable flavor (plus
``restart_s`` if it is not already running there) and ``g_m`` its gang size: Smith's rule,
the completion rate a GPU buys. ``τ`` uses the oracle's remaining steps, so ``hetero_srpt``
is an SRTF-style bound; ``hetero_gittins`` (:mod:`tessera.sched.policies.hetero_gittins`)
replaces ``τ`` by a Gittins index over attained service and needs no oracle. Jobs are taken in
priority order while some flavor has room by count. A gang larger than any node of a flavor is
valued at its *spread* speed there.

**2. Where: match flavors by the gain in completion rate, not by the shortest pair.** Among
the jobs chosen to run, flavors are assigned by the LP ``max Σ X[m,f] / time[m,f]`` (HiGHS)
subject to ``Σ_f X[m,f] = 1`` and GPU capacity. Why this objective: take jobs *i*, *j*, a fast
flavor F and a slow S, with cheap migration. Running *i* on F first and moving *j* there when
*i* ends beats the swap iff ``p_iF(1 − s_j) < p_jF(1 − s_i)`` with ``s = p_F / p_S``, i.e. iff
``1/p_iF − 1/p_iS > 1/p_jF − 1/p_jS``: the fast GPU goes to the job whose completion rate it
raises most. Example: A takes 1 h on a V100 and 8.8 h on a K80, B 0.8 h and 1.7 h; SRPT by
pair puts B on the V100 (sum of JCTs ≈ 2.51 h), matching puts A there (≈ 2.32 h). With equal
speed-ups the LP reduces to SRPT on the fastest GPUs.

**3. Gangs get whole nodes.** The core keeps selected running jobs where they are and places
new gangs into whatever is free, so over time 1-GPU jobs scatter over every node and an 8-GPU
gang is *split across nodes*, where the Gavel profiles run it 2–10× slower (LM at 8 GPUs:
0.1× on V100). In rounds mode the policy asks the core where its selection would go
(:func:`~tessera.sched.core.preview.preview`); when a gang would be split and splitting hurts
it, it stops the fewest lower-priority small jobs that free one node (they are re-placed next
round).
This alone took the Philly 8-GPU mean JCT from 55 h to 20 h (lower bound 19 h).

**No starvation.** A job that has waited (total time since submission not spent running)
more than ``starvation_factor`` times its remaining time ``τ`` jumps above every other job
(longest waiter first), so a big gang facing an endless stream of small jobs still runs after
a bounded wait. Optional linear aging (``aging_s``) is available; on the Philly week it cost
average JCT (5.26 h vs 5.11 h at ``aging_s`` = 4 h), so it is off by default.

Round-based by default (Gavel's 360 s rounds, the mode in which placement can be replayed and
running jobs migrated to faster flavors); in events mode the core never moves running jobs,
so the defragmentation step is skipped. Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from tessera.model.cluster import ClusterSpec, Node
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.sched.core.lp import INF, LpModel, LpSolver, SolverError, solve_lp
from tessera.sched.core.oracle import RateKey, ThroughputOracle, rate_key
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.placement import Layout as _PlacementLayout
from tessera.sched.core.policy import Policy, PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.preview import preview
from tessera.sched.core.snapshot import JobView, Placement, Snapshot

_RUNNING = JobState.RUNNING

_Usable = tuple[tuple[tuple[str, float], ...], float, float]
"""A job's usable flavors with their rates, its best rate and ``gpus ** gang_exponent``."""


@dataclass(slots=True)
class _Nodes:
    """What a round needs of the up nodes, computed once per cluster and set of down nodes
    (a round used to walk every node twice), plus each job kind's usable rates."""

    cluster: ClusterSpec
    down: frozenset[str]
    cap: dict[str, int]
    """GPUs per flavor."""
    node_max: dict[str, int]
    """The largest node of each flavor."""
    by_flavor: dict[str, tuple[str, ...]]
    nodes: tuple[Node, ...]
    placement: _PlacementLayout
    """The up nodes' layout for :class:`FreeGpus` (each round's placement replay)."""
    oracle: ThroughputOracle | None = None
    rates: dict[RateKey, _Usable] = field(default_factory=dict)
    by_job: dict[JobId, tuple[JobSpec, _Usable]] = field(default_factory=dict)
    """Each job's usable rates, noted with its spec (a job is looked up by id, not by key)."""

    @classmethod
    def of(cls, snap: Snapshot) -> _Nodes:
        cap: dict[str, int] = {}
        node_max: dict[str, int] = {}
        by_flavor: dict[str, list[str]] = {}
        nodes = snap.up_nodes()
        for n in nodes:
            f = n.flavor.short
            cap[f] = cap.get(f, 0) + n.gpus
            node_max[f] = max(node_max.get(f, 0), n.gpus)
            by_flavor.setdefault(f, []).append(n.node_id)
        return cls(snap.cluster, snap.down_nodes, cap, node_max,
                   {f: tuple(ns) for f, ns in by_flavor.items()}, nodes,
                   _PlacementLayout.of(nodes))

    def rates_for(
        self, oracle: ThroughputOracle
    ) -> dict[RateKey, _Usable]:
        """The usable-rates cache, valid for ``oracle`` (one per simulation in practice)."""
        if self.oracle is not oracle:
            self.oracle = oracle
            self.rates = {}
            self.by_job = {}
        return self.rates

    def usable(self, ctx: PolicyContext, spec: JobSpec, gang_exponent: float) -> _Usable:
        """The flavors with room for the gang by count, at its consolidated speed if it fits
        on one node of the flavor, else its spread speed."""
        g = spec.num_gpus
        cap = self.cap
        rates: dict[str, float] = {}
        for r in ctx.oracle.rates(spec):
            if r.flavor not in cap or g > cap[r.flavor]:
                continue
            rate = r.consolidated if g <= self.node_max[r.flavor] else r.spread
            if rate > 0:
                rates[r.flavor] = rate
        top = max(rates.values()) if rates else 0.0
        return tuple(rates.items()), top, g ** gang_exponent


class HeteroSrptConfig(PolicyConfig):
    restart_s: float = Field(
        60.0, ge=0, description="checkpoint + restore seconds charged to starting or moving a job"
    )
    gang_exponent: float = Field(
        1.0, ge=0, description="priority 1/(τ·g^x): 1 = Smith's rule per GPU, 0 = per job"
    )
    aging_s: float | None = Field(
        None, gt=0, description="multiply priority by 1 + waited/aging_s (off: None)"
    )
    starvation_factor: float | None = Field(
        4.0, gt=0, description="a job that waited more than this × its remaining time goes first"
    )
    match: bool = Field(True, description="assign flavors by the completion-rate LP")
    defrag: bool = Field(True, description="clear a node for a gang that would be split")


class HeteroSrpt(Policy):
    """See the module docstring."""

    preemptive = True
    round_based = True
    Config = HeteroSrptConfig

    def _remaining_best_s(self, j: JobView, best_rate: float, now_s: float,
                          ctx: PolicyContext) -> float:
        """Remaining seconds on the job's fastest flavor: oracle knowledge (SRTF's bound)."""
        return j.remaining_at(now_s) / best_rate

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, HeteroSrptConfig)
        snap = ctx.snapshot
        now = snap.now_s
        nodes = self._nodes_of(ctx)
        cap = nodes.cap
        rates_of = nodes.rates_for(ctx.oracle)
        remaining_best_s = self._remaining_best_s
        restart_s = cfg.restart_s
        aging_s = cfg.aging_s
        starvation = cfg.starvation_factor
        # (the oracle's remaining time, inlined: JobView.remaining_at, then ÷ the best rate)
        oracle_tau = type(self)._remaining_best_s is HeteroSrpt._remaining_best_s
        by_job = nodes.by_job
        jobs: list[tuple[tuple[float, float, JobId], JobView, dict[str, float], list[str]]] = []
        # whether the first of each job's sorted flavors is the cheapest in the cost table's
        # order (the matching LP's test; it can differ only if a cost is nan)
        first_choice = True
        for j in snap.jobs:
            spec = j.spec
            jid = spec.job_id
            hit = by_job.get(jid)
            if hit is not None and hit[0] is spec:
                usable = hit[1]
            else:
                key = rate_key(spec)
                kept = rates_of.get(key)
                if kept is None:
                    kept = rates_of[key] = nodes.usable(ctx, spec, cfg.gang_exponent)
                usable = kept
                by_job[jid] = (spec, usable)
            rates, top, g_pow = usable
            if not rates:
                continue
            state = j.state
            if oracle_tau:
                steps_left = j.remaining_steps
                rate_now = j.progress_rate
                if state is _RUNNING and rate_now > 0:
                    as_of = j.as_of_s
                    pf = j.progress_from_s
                    start = pf if pf > as_of else as_of  # (max(as_of, pf), without the call)
                    if now > start:
                        v = steps_left - rate_now * (now - start)
                        steps_left = 0.0 if v < 0.0 else v
                tau = steps_left / top
            else:
                tau = remaining_best_s(j, top, now, ctx)
            p = j.placement
            cur = p.flavor if p is not None and state is _RUNNING else None
            # A flavor's cost is tau * top / rate, evaluated left to right as (tau * top) / rate.
            tau_top = tau * top
            if len(rates) == 1:
                f, rate = rates[0]
                best = tau_top / rate + (0.0 if f == cur else restart_s)
                cost = {f: best}
                order = [f]
            elif len(rates) == 2:
                # (the general case's min and stable sort, spelled out for two flavors: the
                # second goes first only when strictly cheaper)
                (f0, r0), (f1, r1) = rates
                c0 = tau_top / r0 + (0.0 if f0 == cur else restart_s)
                c1 = tau_top / r1 + (0.0 if f1 == cur else restart_s)
                cost = {f0: c0, f1: c1}
                if c1 < c0:
                    best, order = c1, [f1, f0]
                else:
                    best, order = c0, [f0, f1]
            else:
                cost = {f: tau_top / rate + (0.0 if f == cur else restart_s) for f, rate in rates}
                best = min(cost.values())
                order = sorted(cost, key=cost.__getitem__)
                if order[0] != min(cost, key=cost.__getitem__):  # (only if a cost is nan)
                    first_choice = False
            prio = 1.0 / (best * g_pow) if best > 0.0 else INF  # done: finishing now
            run_s = j.run_s_by_flavor
            ran = run_s[0][1] if len(run_s) == 1 else sum(t for _f, t in run_s)
            waited = now - spec.submit_time_s - ran
            if waited < 0.0:  # (max(waited, 0.0), without the call)
                waited = 0.0
            if aging_s is not None:
                prio *= 1.0 + waited / aging_s
            if starvation is not None and waited > starvation * best:
                prio = 1e30 * (1.0 + waited)
            jobs.append(((-prio, spec.submit_time_s, jid), j, cost, order))
        jobs.sort(key=itemgetter(0))
        selected, rest, took_first = self._select(jobs, cap)
        first_choice = first_choice and took_first
        fallbacks: tuple[str, ...] = ()
        if not first_choice:
            if cfg.match:
                selected, fallbacks = self._match(selected, cap, ctx.lp())
            selected = self._finalize(selected, cap)
        displaced: set[JobId] = set()
        if cfg.defrag and snap.round_s is not None:
            displaced = self._plan(snap, selected, ctx)
        cands: list[tuple[JobId, str]] = [
            (jid, f) for j, _cost, order in selected
            if (jid := j.spec.job_id) not in displaced for f in order]
        cands += [(j.spec.job_id, f) for j, order in rest for f in order]
        return Ranking(tuple(cands), fallbacks=fallbacks)

    @staticmethod
    def _select(
        ranked: list[tuple[tuple[float, float, JobId], JobView, dict[str, float], list[str]]],
        cap: dict[str, int],
    ) -> tuple[list[tuple[JobView, dict[str, float], list[str]]],
               list[tuple[JobView, list[str]]], bool]:
        """Take jobs in priority order while some flavor of theirs has room by count.

        Returns the selected jobs (each with its cost table and its flavors, the one it took
        first), the others with their flavors, and whether every selected job took the first
        of its flavors -- then the matching LP and :meth:`_finalize` leave the selection as it
        is, and :meth:`rank` skips both.
        """
        left = dict(cap)
        selected: list[tuple[JobView, dict[str, float], list[str]]] = []
        rest: list[tuple[JobView, list[str]]] = []
        first_choice = True
        for _key, j, cost, order in ranked:
            g = j.spec.num_gpus
            for fl in order:
                if left.get(fl, 0) >= g:
                    break
            else:
                rest.append((j, order))
                continue
            left[fl] -= g
            if order[0] == fl:
                selected.append((j, cost, order))
            else:
                first_choice = False
                selected.append((j, cost, [fl] + [f for f in order if f != fl]))
        return selected, rest, first_choice

    def _nodes_of(self, ctx: PolicyContext) -> _Nodes:
        """The up nodes' static layout, rebuilt only when the cluster or its down nodes change
        (kept in the driver's policy caches, :meth:`PolicyContext.cache`)."""
        snap = ctx.snapshot
        held: list[_Nodes] = ctx.cache(self, "nodes", list)
        if not held or held[0].cluster is not snap.cluster or held[0].down != snap.down_nodes:
            held[:] = [_Nodes.of(snap)]
        return held[0]

    @staticmethod
    def _finalize(
        selected: list[tuple[JobView, dict[str, float], list[str]]], cap: dict[str, int]
    ) -> list[tuple[JobView, dict[str, float], list[str]]]:
        """Walk the list as the core will and put each job's winning flavor first."""
        left = dict(cap)
        out = []
        for j, cost, order in selected:
            g = j.spec.num_gpus
            for fl in order:
                if left.get(fl, 0) >= g:
                    break
            else:
                out.append((j, cost, order))
                continue
            left[fl] -= g
            out.append((j, cost, order if order[0] == fl else
                        [fl] + [f for f in order if f != fl]))
        return out

    def _plan(
        self,
        snap: Snapshot,
        selected: list[tuple[JobView, dict[str, float], list[str]]],
        ctx: PolicyContext,
    ) -> set[JobId]:
        """Clear one node for a gang the core would otherwise split (and splitting hurts it).

        Returns the running jobs to stop this round (they are re-placed next round). Where the
        core would put each gang is the core's own answer (:func:`~tessera.sched.core.preview.
        preview`: kept jobs, then new gangs largest first, best fit, else spread); this policy
        only decides whom to stop (:meth:`_clear`).
        """
        layout = self._nodes_of(ctx)
        pv = preview(layout.nodes, layout.placement,
                     [(j, order[0]) for j, _cost, order in selected])
        if pv is None:
            return set()
        displaced: set[JobId] = set()
        for j, fl in pv.new:
            if pv.would_split(j, fl) and self._split_hurts(ctx, j, fl):
                g = j.spec.num_gpus
                node = self._clear(layout.by_flavor.get(fl, ()), pv.free, pv.occupants, g,
                                   displaced)
                if node is not None:
                    pv.take(Placement(fl, ((node, g),)))
                    continue
            pv.place(j, fl)
        return displaced

    @staticmethod
    def _split_hurts(ctx: PolicyContext, j: JobView, fl: str) -> bool:
        for r in ctx.oracle.rates(j.spec):
            if r.flavor == fl:
                return r.spread < 0.95 * r.consolidated
        return False

    @staticmethod
    def _clear(
        nodes: Sequence[str],
        free: FreeGpus,
        occupants: dict[str, list[JobView]],
        g: int,
        displaced: set[JobId],
    ) -> str | None:
        """The node where stopping the fewest GPUs of lower-priority small jobs frees ``g``
        (those jobs' GPUs are released in ``free``)."""
        best = None
        best_cost = (1 << 30, 1 << 30)
        for n in nodes:
            movable = [o for o in occupants.get(n, ()) if o.job_id not in displaced
                       and o.spec.num_gpus < g]
            need = g - free.free_on(n)
            if need <= 0 or sum(o.spec.num_gpus for o in movable) < need:
                continue
            movable.sort(key=lambda o: o.spec.num_gpus)
            took, k = 0, 0
            while took < need:
                took += movable[k].spec.num_gpus
                k += 1
            cost = (took, k)
            if cost < best_cost:
                best, best_cost = n, cost
        if best is None:
            return None
        movable = sorted((o for o in occupants.get(best, ()) if o.job_id not in displaced
                          and o.spec.num_gpus < g), key=lambda o: o.spec.num_gpus)
        need = g - free.free_on(best)
        for o in movable:
            if need <= 0:
                break
            assert o.placement is not None
            displaced.add(o.job_id)
            free.release(o.placement)
            need -= o.spec.num_gpus
        return best

    @staticmethod
    def _match(
        selected: list[tuple[JobView, dict[str, float], list[str]]], cap: dict[str, int],
        solver: LpSolver,
    ) -> tuple[list[tuple[JobView, dict[str, float], list[str]]], tuple[str, ...]]:
        """Reorder each selected job's flavors by a completion-rate matching LP; returns the
        selection and, when the LP failed and the greedy order was kept, why."""
        if all(order[0] == min(cost, key=cost.__getitem__) for _j, cost, order in selected):
            return selected, ()
        flavors = list(cap)
        col = {f: i for i, f in enumerate(flavors)}
        rows, cols, vals = [], [], []
        for m, (_j, cost, _o) in enumerate(selected):
            for f, c in cost.items():
                rows.append(m)
                cols.append(col[f])
                vals.append(1.0 / max(c, 1e-9))
        n = len(rows)
        r = np.array(rows)
        cc = np.array(cols)
        g = np.array([float(s[0].spec.num_gpus) for s in selected])
        var = np.arange(n)
        mcount = len(selected)
        a = sp.vstack([
            sp.csr_matrix((np.ones(n), (r, var)), shape=(mcount, n)),
            sp.csr_matrix((g[r], (cc, var)), shape=(len(flavors), n)),
        ]).tocsc()
        lo = np.concatenate([np.ones(mcount), np.full(len(flavors), -INF)])
        hi = np.concatenate([np.ones(mcount), np.array([float(cap[f]) for f in flavors])])
        try:
            x = solve_lp(LpModel(np.array(vals), a, lo, hi, np.zeros(n), np.ones(n),
                                 maximize=True), what="hetero_srpt matching LP", solver=solver)
        except SolverError as e:
            return selected, (f"{e}; kept the greedy flavor order",)
        share: list[dict[str, float]] = [{} for _ in selected]
        for k in range(n):
            share[rows[k]][flavors[cols[k]]] = x[k]
        out = []
        for m, (j, cost, order) in enumerate(selected):
            sh = share[m]
            out.append((j, cost, sorted(order, key=lambda f: (-round(sh.get(f, 0.0), 6), cost[f]))))
        return out, ()
