"""``hetero_pack``: ``hetero_gittins`` that also space-shares GPUs (no oracle durations).

``hetero_gittins`` decides who runs (Gittins index over attained service, per GPU) and where
(flavors matched by completion rate, whole nodes for gangs). ``hetero_pack`` keeps its order and
its gang rules, and chooses flavors and space-sharing pairs together, at the pair speeds Gavel
measured.

**What a slot is worth.** Two jobs sharing a GPU each run slower than alone. Measure each
job's progress *normalised* by its best speed alone (``rate / best``: 1 is the job alone on its
fastest flavor). A job alone on flavor ``f`` is worth ``a_f / best``; a pair on ``f`` is worth
``r_1 / best_1 + r_2 / best_2`` at the two speeds Gavel measured for it -- more than one job
alone when the two use different parts of the GPU, less when they fight over the same part.

**Flavors by throughput.** ``hetero_gittins`` hands its flavors out by *completion rate*
(speed ÷ expected work left), which puts a young job on the V100 even where an old one gains ten
times more from it. ``hetero_pack`` weighs each job's flavors by its speed there relative to its
best instead (every job counts alike), so the fast GPUs go to the jobs they speed up most; who
runs at all is still decided by the Gittins order. On the heavy Gavel-like traces this alone
took ``hetero_pack`` from 0.95-0.98× to 0.92-0.96× of the best Gavel policy; weights in between
(``τ^-α`` for α = 0.25, 0.5, or ``1 / (τ + T)`` for T = 1, 10, 100 h) all did worse than α = 0.

**Two kinds of partner.** A job left waiting may join a host where the pair does more work than
the host alone -- packing a queue. A job the round runs anyway may also pair (``move_slow``):
half a V100 often beats a whole K80, and the K80 it leaves goes to a job that would have
waited. On a cluster that is busy but not full (a third of its GPUs K80s, most jobs on them for
part of their life) this second kind is most of the gain. A running job that moves pays its
restart (``restart_s`` of the round); a host that stays on its flavor pays none.

**Flavors and pairs together.** Who runs is the Gittins order's answer; *where* they run and
*with whom* is one small integer programme a round (:mod:`tessera.sched.packing.slots`): every job
the order runs keeps a slot -- alone on a flavor or in a pair -- waiting jobs may take what is left,
and the programme maximises the round's normalised progress. Jobs alike (job type, gang size,
allowed flavors, declared memory, where they run now) are one group, so the programme grows with
the kinds of job, not their number. A pair is offered only when it does more than ``(1 +
min_gain)`` × the better of its two jobs alone on that GPU. Within a group the best slots go to
the highest-ranked jobs, and two jobs sharing a gang now stay together when the plan keeps such
a pair.

**Short jobs first, a little (off by default).** ``short_first`` = α weighs each job's progress
by ``(expected hours left)^-α`` (hours from the same Gittins estimate as the order, rounded to a
power of two so that jobs within an octave stay one group): between two jobs that gain alike
from a fast GPU, the one expected to end sooner gets it. Under ``--compat gavel``, where moving
is free, α = 0.1 took the 400-job traces at 3 jobs/h from 0.921/0.915/0.942× of the best Gavel
policy (seeds 0/1/2) to 0.918/0.912/0.934× (α = 0.15 and 0.2 no better; favouring long jobs,
α < 0, worse: 0.940× at -0.1), and gains nothing at 2 jobs/h or on 100-job bursts. On the
Philly week with Tessera's costs its effect is lost in a ±10 % spread between runs that differ
in small things (docs/scheduler.md has the table). So every job counts alike unless asked:
``-p hetero_pack:short_first=0.1``.

**Gangs and rounds without pairs keep the base flavors.** The programme counts GPUs per flavor,
not servers: a gang of several GPUs it puts on a flavor may not fit that flavor's servers, and
the base ranking (``hetero_srpt``'s matching, finalisation and defragmentation) knows them. So
gangs the order runs keep its flavors and their GPUs leave the programme's capacity, waiting
gangs are not planned, and a round whose plan forms no pair keeps the base ranking as it is. On
the Philly week with Tessera's costs (gangs of 1-8 GPUs on 8-GPU servers) planning gangs too
took the demo cluster from 5.09 h to 5.68-6.12 h (behind ``hetero_gittins``' 5.16) and moved
jobs 2-3× as often; with this rule it is 5.094 h, and 7.98 h on the quarter cluster
(``hetero_gittins`` 9.42). Gavel's traces for its packed policies have one-GPU jobs only, so
gangs never share here; Tessera's round driver and the live service still run gang pairs a
policy names.

Packing never stops a job the order runs, and ``hetero_srpt``'s starvation rule still puts a
job that waited too long first. A pair without a positive measurement, a job marked
``exclusive``, or a pair whose declared memory does not fit is never offered
(:func:`tessera.sched.packing.pairs.may_share`). When HiGHS returns no plan the round keeps
``hetero_gittins``' flavors, packs nothing, and says so in the run's notes.

**Measured and dropped.** Until 2026-12-02 the flavors came from the matching LP and the pairs
from a greedy pass, largest gain first: 0.94-0.96× of the best Gavel policy on 400-job traces at
3 jobs/h, where the programme reaches 0.92 (``benchmarks/bench_packing.py``; figures in
docs/scheduler.md). Weighing each job's progress by its expected completion rate (÷ its Gittins
remaining time, as ``hetero_srpt`` weighs flavors) packed less where it mattered: 2-3 % worse
average JCT on 100-job heavy traces and 14 % worse on a 400-job trace at 3 jobs/h.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from pydantic import Field

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec, JobState
from tessera.perf.colocation import PairRates, PairRefusal
from tessera.perf.profiles import ThroughputTable
from tessera.sched.core.lp import LpSolver
from tessera.sched.core.policy import PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView
from tessera.sched.packing.pairs import may_share
from tessera.sched.packing.slots import PairOption, SlotGroup, plan_slots
from tessera.sched.policies.hetero_gittins import HeteroGittins, HeteroGittinsConfig
from tessera.sched.policies.hetero_pack_slots import (
    Member,
    PairWay,
    fill_slots,
    moves,
    ranked_candidates,
    replay_selection,
)
from tessera.sched.policies.hetero_srpt import HeteroSrpt


class HeteroPackConfig(HeteroGittinsConfig):
    min_gain: float = Field(
        0.1, ge=0,
        description="a pair may form when it does more than (1 + this) × the better of its two "
        "jobs alone on that GPU",
    )
    move_slow: bool = Field(
        True, description="jobs the round runs anyway may pair with each other (a job on a slow "
        "flavor joining a host on a fast one); else only waiting jobs become partners",
    )
    scan_factor: int = Field(
        4, ge=1, description="waiting jobs examined per GPU-holding job (bounds a round's cost)"
    )
    short_first: float = Field(
        0.0, ge=0, le=1, description="α: each job's progress counts (expected hours left)^-α, "
        "hours rounded to a power of two (0, the default: every job alike)",
    )


class HeteroPack(HeteroGittins):
    """See the module docstring."""

    packs = True
    Config = HeteroPackConfig

    def rank(self, ctx: PolicyContext) -> Ranking:
        base = super().rank(ctx)
        cfg = self.config
        assert isinstance(cfg, HeteroPackConfig)
        snap = ctx.snapshot
        by_id = {j.job_id: j for j in snap.jobs}
        hosts, waiting = replay_selection(base, by_id, snap)
        if not hosts:
            return base
        capacity: dict[GpuFlavor, int] = {}
        for node in snap.up_nodes():
            capacity[node.flavor] = capacity.get(node.flavor, 0) + node.gpus
        restart = min(cfg.restart_s / snap.round_s, 1.0) if snap.round_s else 0.0
        order = {jid: i for i, jid in enumerate(dict.fromkeys(j for j, _f in base.candidates))}
        # Gangs of several GPUs keep the base ranking's flavors (it knows servers; the programme
        # counts GPUs per flavor only): their GPUs are taken out of the programme's capacity.
        for jid, fl in hosts.items():
            if by_id[jid].spec.num_gpus > 1:
                capacity[fl] -= by_id[jid].spec.num_gpus
        jobs = sorted([jid for jid in [*hosts, *waiting[: cfg.scan_factor * len(hosts)]]
                       if by_id[jid].spec.num_gpus == 1], key=order.__getitem__)
        keys: dict[tuple[object, ...], int] = {}
        groups: list[list[Member]] = []
        specs: list[JobSpec] = []
        musts: list[bool] = []
        solos: list[dict[GpuFlavor, float]] = []
        weights: list[float] = []
        for jid in jobs:
            j = by_id[jid]
            spec = j.spec
            p = j.placement if j.state is JobState.RUNNING else None
            now_on = p.flavor if p is not None else None
            shared = bool(p is not None and p.colocated_with)
            octave = self._octave_left(ctx, j)
            key = (spec.job_type, spec.num_gpus, spec.flavors, spec.memory_gib,
                   spec.exclusive, jid in hosts, now_on, shared, octave)
            g = keys.get(key)
            if g is None:
                weight = 2.0 ** (-cfg.short_first * octave)
                solo = self._solo_values(ctx, spec, now_on, restart, capacity, weight)
                if not solo:
                    continue
                g = keys[key] = len(groups)
                groups.append([])
                specs.append(spec)
                musts.append(jid in hosts)
                solos.append(solo)
                weights.append(weight)
            partner_now = p.colocated_with[0] if p is not None and p.colocated_with else None
            groups[g].append(Member(jid, now_on, partner_now))
        options, ways = self._options(ctx, groups, specs, musts, solos, weights, restart)
        plan = plan_slots(
            [SlotGroup(specs[g].num_gpus, len(members), len(members) if musts[g] else 0,
                       solos[g]) for g, members in enumerate(groups)],
            options, capacity, ctx.lp(),
        )
        if isinstance(plan, str):
            why = (f"slot programme: HiGHS ended with {plan}; this round packs nothing and "
                   "keeps hetero_gittins' flavors")
            return replace(base, fallbacks=(*base.fallbacks, why))
        if not plan.pairs and not cfg.short_first:
            # Nothing shares: the base ranking's flavors, which know servers and gangs (the
            # programme counts GPUs per flavor only) -- see the module docstring.
            return base
        where, partner_of = fill_slots(groups, solos, options, ways, plan)
        return Ranking(ranked_candidates(base, where, partner_of), state=base.state,
                       notes=base.notes, wakeup_s=base.wakeup_s, fallbacks=base.fallbacks,
                       colocate=partner_of)

    def _octave_left(self, ctx: PolicyContext, j: JobView) -> int:
        """The job's expected hours left on its best flavor (Gittins, as it ranks), as a power
        of two: jobs within one octave weigh alike (0 when ``short_first`` is off)."""
        cfg = self.config
        assert isinstance(cfg, HeteroPackConfig)
        best = ctx.oracle.best_rate(j.spec)
        if not cfg.short_first or best <= 0:
            return 0
        hours = self._remaining_best_s(j, best, ctx.snapshot.now_s, ctx) / 3600.0
        return round(math.log2(min(max(hours, 2.0**-6), 2.0**12)))

    def _solo_values(self, ctx: PolicyContext, spec: JobSpec, now_on: GpuFlavor | None,
                     restart: float, capacity: Mapping[GpuFlavor, int], weight: float,
                     ) -> dict[GpuFlavor, float]:
        """``{flavor: value}`` of the job alone there: its speed over its best speed, less the
        part of the round a restart costs where the slot moves it, × its weight."""
        best = ctx.oracle.best_rate(spec)
        if best <= 0:
            return {}
        return {r.flavor: weight * r.consolidated / best
                * (1.0 - moves(now_on, r.flavor) * restart)
                for r in ctx.oracle.rates(spec)
                if r.consolidated > 0 and r.flavor in capacity}

    def _options(
        self, ctx: PolicyContext, groups: list[list[Member]], specs: list[JobSpec],
        musts: list[bool], solos: list[dict[GpuFlavor, float]], weights: list[float],
        restart: float,
    ) -> tuple[list[PairOption], list[PairWay]]:
        """The pairs worth offering the programme: measured, allowed, on a flavor both may
        use, and doing more than ``(1 + min_gain)`` × the better of the two alone there."""
        cfg = self.config
        assert isinstance(cfg, HeteroPackConfig)
        oracle = ctx.oracle
        best = [oracle.best_rate(s) for s in specs]
        options: list[PairOption] = []
        ways: list[PairWay] = []
        for a in range(len(groups)):
            sa = specs[a]
            if sa.exclusive:
                continue
            for b in range(a, len(groups)):
                sb = specs[b]
                if (sb.exclusive or sb.num_gpus != sa.num_gpus
                        or (a == b and len(groups[a]) < 2)
                        or (musts[a] and musts[b] and not cfg.move_slow)):
                    continue
                now_a, now_b = groups[a][0].now_on, groups[b][0].now_on
                together = (groups[a][0].partner_now is not None
                            and groups[b][0].partner_now is not None and now_a == now_b)
                for f, alone_a in solos[a].items():
                    alone_b = solos[b].get(f)
                    if alone_b is None:
                        continue
                    rates = self._pair(ctx, oracle.table, sa, sb, f)
                    if rates is None:
                        continue
                    ra = weights[a] * rates.first_steps_per_s / best[a]
                    rb = weights[b] * rates.second_steps_per_s / best[b]
                    # The host keeps its GPUs if it runs on ``f`` now; the partner moves onto
                    # them (a restart) unless the two share a gang of ``f`` already.
                    stays = together and now_a == f
                    a_hosts = (ra * (1.0 - moves(now_a, f) * restart),
                               rb * (1.0 - (not stays and now_b is not None) * restart))
                    b_hosts = (ra * (1.0 - (not stays and now_a is not None) * restart),
                               rb * (1.0 - moves(now_b, f) * restart))
                    way = (PairWay(True, *a_hosts) if sum(a_hosts) >= sum(b_hosts)
                           else PairWay(False, *b_hosts))
                    value = way.first_share + way.second_share
                    if value > (1.0 + cfg.min_gain) * max(alone_a, alone_b):
                        options.append(PairOption(a, b, f, value))
                        ways.append(way)
        return options, ways

    @staticmethod
    def _match(
        selected: list[tuple[JobView, dict[GpuFlavor, float], list[GpuFlavor]]],
        cap: dict[GpuFlavor, int], solver: LpSolver,
    ) -> tuple[list[tuple[JobView, dict[GpuFlavor, float], list[GpuFlavor]]], tuple[str, ...]]:
        """The matching LP of :class:`HeteroSrpt`, each job's weights divided by its best one
        (its seconds on each flavor over its seconds on the best): normalised throughput, not
        completion rate (see the module docstring)."""
        scaled = []
        for j, cost, order in selected:
            best = max(min(cost.values()), 1e-9)
            scaled.append((j, {f: c / best for f, c in cost.items()}, order))
        matched, fallbacks = HeteroSrpt._match(scaled, cap, solver)
        costs = {id(j): cost for j, cost, _order in selected}
        return [(j, costs[id(j)], order) for j, _c, order in matched], fallbacks

    def _pair(self, ctx: PolicyContext, table: ThroughputTable, host: JobSpec,
              partner: JobSpec, flavor: GpuFlavor) -> PairRates | None:
        """:func:`~tessera.sched.packing.pairs.may_share` for jobs without declared memory (cached
        per job kind, in the driver's policy caches), or for any pair with memory declared (not
        cached)."""
        cluster = ctx.snapshot.cluster
        if host.memory_gib is not None or partner.memory_gib is not None:
            got = may_share(table, cluster, host, partner, flavor)
            return None if isinstance(got, PairRefusal) else got
        key = (host.job_type, partner.job_type, host.num_gpus, partner.num_gpus, flavor,
               host.flavors, partner.flavors, id(table))
        pairs: dict[tuple[object, ...], PairRates | None] = ctx.cache(self, "pairs", dict)
        if key not in pairs:
            if len(pairs) > 100_000:
                pairs.clear()
            got = may_share(table, cluster, replace(host, exclusive=False),
                            replace(partner, exclusive=False), flavor)
            pairs[key] = None if isinstance(got, PairRefusal) else got
        return pairs[key]
