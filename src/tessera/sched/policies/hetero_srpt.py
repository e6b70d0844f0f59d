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
from operator import itemgetter

from pydantic import Field

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.lp import INF
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.policy import Policy, PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.preview import preview
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sched.policies.hetero_flavors import NodeRates, flavor_costs, match_flavors

_RUNNING = JobState.RUNNING

_Costed = tuple[JobView, dict[GpuFlavor, float], list[GpuFlavor]]
"""A selected job, its cost (seconds to finish) on each flavor, and its flavors in order."""
_Ranked = tuple[tuple[float, float, JobId], JobView, dict[GpuFlavor, float], list[GpuFlavor]]
"""A job with its sort key, view, cost per flavor and flavors cheapest first."""

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
    oracle = "each job's true remaining time, taken from the trace"

    _match = staticmethod(match_flavors)

    def _remaining_best_s(self, j: JobView, best_rate: float, now_s: float,
                          ctx: PolicyContext) -> float:
        """Remaining seconds on the job's fastest flavor: oracle knowledge (SRTF's bound)."""
        return j.remaining_at(now_s) / best_rate

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, HeteroSrptConfig)
        snap = ctx.snapshot
        nodes = self._nodes_of(ctx)
        cap = nodes.cap
        jobs, first_choice = self._prioritised(ctx, cfg, nodes)
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
        cands: list[tuple[JobId, GpuFlavor]] = [
            (jid, f) for j, _cost, order in selected
            if (jid := j.spec.job_id) not in displaced for f in order]
        cands += [(j.spec.job_id, f) for j, order in rest for f in order]
        return Ranking(tuple(cands), fallbacks=fallbacks)

    def _prioritised(
        self, ctx: PolicyContext, cfg: HeteroSrptConfig, nodes: NodeRates
    ) -> tuple[list[_Ranked],
               bool]:
        """Every job with a usable flavor: ``(sort key, view, cost per flavor, flavors
        cheapest first)`` -- the key is ``(-priority, submit time, id)`` -- and whether the
        first of each job's sorted flavors is the cheapest in its cost table's order (the
        matching LP's test; it can differ only if a cost is nan)."""
        snap = ctx.snapshot
        now = snap.now_s
        nodes.rates_for(ctx.oracle)
        remaining_best_s = self._remaining_best_s
        restart_s = cfg.restart_s
        aging_s = cfg.aging_s
        starvation = cfg.starvation_factor
        # (the oracle's remaining time, inlined: JobView.remaining_at, then ÷ the best rate)
        oracle_tau = type(self)._remaining_best_s is HeteroSrpt._remaining_best_s
        jobs: list[_Ranked] = []
        first_choice = True
        for j in snap.jobs:
            spec = j.spec
            rates, top, g_pow = nodes.usable_of(ctx, spec, cfg.gang_exponent)
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
            cur = p.sole_flavor if p is not None and state is _RUNNING else None
            cost, best, order, sorted_ok = flavor_costs(rates, tau * top, cur, restart_s)
            first_choice = first_choice and sorted_ok
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
            jobs.append(((-prio, spec.submit_time_s, spec.job_id), j, cost, order))
        return jobs, first_choice

    @staticmethod
    def _select(
        ranked: list[_Ranked],
        cap: dict[GpuFlavor, int],
    ) -> tuple[list[_Costed],
               list[tuple[JobView, list[GpuFlavor]]], bool]:
        """Take jobs in priority order while some flavor of theirs has room by count.

        Returns the selected jobs (each with its cost table and its flavors, the one it took
        first), the others with their flavors, and whether every selected job took the first
        of its flavors -- then the matching LP and :meth:`_finalize` leave the selection as it
        is, and :meth:`rank` skips both.
        """
        left = dict(cap)
        selected: list[_Costed] = []
        rest: list[tuple[JobView, list[GpuFlavor]]] = []
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

    def _nodes_of(self, ctx: PolicyContext) -> NodeRates:
        """The up nodes' static layout, rebuilt only when the cluster or its down nodes change
        (kept in the driver's policy caches, :meth:`PolicyContext.cache`)."""
        snap = ctx.snapshot
        held: list[NodeRates] = ctx.cache(self, "nodes", list)
        if not held or held[0].cluster is not snap.cluster or held[0].down != snap.down_nodes:
            held[:] = [NodeRates.of(snap)]
        return held[0]

    @staticmethod
    def _finalize(
        selected: list[_Costed], cap: dict[GpuFlavor, int]
    ) -> list[_Costed]:
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
        selected: list[_Costed],
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
                    pv.take(Placement.of(fl, ((node, g),)))
                    continue
            pv.place(j, fl)
        return displaced

    @staticmethod
    def _split_hurts(ctx: PolicyContext, j: JobView, fl: GpuFlavor) -> bool:
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
