"""One scheduling round: ``decide(snapshot, policy, ctx, options) -> Decision``.

The round is a pure function: it reads an immutable :class:`~tessera.sched.core.snapshot.Snapshot`
and returns a new :class:`Decision`; no I/O, no clock reads (the phase timings are diagnostics
and never influence the result). Whatever keeps state -- the oracle's caches, the random stream,
the LP solver, the node layout -- comes in the driver's
:class:`~tessera.sched.core.context.DecisionContext`. Simulator and live service call it alike,
so the policy that was simulated is the policy that runs.

Phases, each timed:

1. **admit** -- tenant quotas: a pending job whose queue would exceed its nominal quota plus
   its borrowing limit is held (reason: quota). A snapshot whose tenancy has cohorts,
   per-flavor quotas, fair sharing or preemption rules runs the tenancy round instead
   (:mod:`tessera.sched.core.quota_round`), where quotas bind at placement.
2. **order** -- the policy ranks ``(job, flavor)`` candidates.
3. **place** -- two strategies over the same ranking. *Round-based* policies (Gavel's
   time-sharing) reconsider every job each round: select by rank while each flavor has GPUs,
   keep selected running gangs where they are, place the rest largest first, backfill.
   A running gang whose run has not yet progressed for as long as a swap costs keeps its GPUs
   (:func:`~tessera.sched.core.cadence.leased`), so no round length can make jobs thrash.
   *Event-driven* policies keep running gangs where they are, place waiting jobs in rank
   order, and preempt lower-ranked gangs only to make room for a higher-ranked job that
   cannot otherwise start (as Kueue and Tiresias do). When nobody waits, a preemptive
   policy moves a running gang to a faster free flavor if that pays for the migration.
4. **preempt** -- running jobs that lost their place are stopped (checkpointed).
5. **explain** -- every job left pending gets a reason, ordered like Kueue's outcomes.
6. **power** -- power limits, and starts held back, under a power budget (:mod:`.power_budget`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tessera.model.jobs import JobId, JobState
from tessera.sched.core.cadence import leased
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.cpu_stage import place_cpu_jobs, split_cpu_only
from tessera.sched.core.cpu_yield import give_way
from tessera.sched.core.energy_choice import zeus_limits
from tessera.sched.core.laps import Laps as _Laps
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.core.power_budget import Levels, budget_stage, held_reason, levels_for
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.power_refill import Refill, refill
from tessera.sched.core.power_weights import power_weights
from tessera.sched.core.quota_drain import draining_use
from tessera.sched.core.quota_round import needs_tenancy_round, tenancy_round
from tessera.sched.core.reasons import PendingKind, PendingReason, QuotaHeld, pending_reasons
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sched.core.strategies import (
    PlacementOptions,
    Releases,
    backfill,
    needs_locality,
    place_events,
    place_rounds,
    upgrade,
)
from tessera.sched.elastic.sizes import sized_views, with_batches, within_quotas
from tessera.sched.mixed.placement import mixed_no_plan
from tessera.sched.packing.pairs import colocate, partners_for, unpair
from tessera.sched.resources.allocate import allocate_hosts, repack_round

__all__ = ["Decision", "PendingKind", "PendingReason", "PlacementOptions", "decide"]

@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one round.

    Attributes:
        placements: every job that runs after this round, with its GPUs.
        started: jobs that start, resume or move (their placement is new).
        preempted: running jobs stopped to make room.
        pending: reason for every active job left waiting.
        policy_state: the policy's memory, to pass back in the next snapshot.
        wakeup_s: when the policy wants to be asked again even if nothing happens.
        notes: per-job explanations from the policy.
        fallbacks: every time the policy did not get the answer it asked for (a solver that
            failed and was replaced, a search that found nothing); drivers put them in the
            run's notes.
        phase_ms: wall milliseconds spent in each phase (diagnostics only).
        power_limits_w: with a power budget, the power limit of each capped running job
            (absent: its flavor's maximum); empty without a budget.
        ranking: the policy's answer the round placed by (the power refill reuses it).
    """

    placements: Mapping[JobId, Placement]
    started: tuple[JobId, ...]
    preempted: tuple[JobId, ...]
    pending: Mapping[JobId, PendingReason]
    policy_state: Any = None
    wakeup_s: float | None = None
    notes: Mapping[JobId, str] = field(default_factory=dict)
    fallbacks: tuple[str, ...] = ()
    phase_ms: tuple[tuple[str, float], ...] = ()
    power_limits_w: Mapping[JobId, float] = field(default_factory=dict)
    ranking: Ranking | None = field(default=None, repr=False, compare=False)


def _admit(snapshot: Snapshot) -> tuple[Sequence[JobView], dict[JobId, PendingReason]]:
    """Hold pending jobs whose queue would exceed nominal quota + borrowing limit (without
    quotas: every job, the snapshot's own tuple -- an event round does not copy the active
    jobs)."""
    quotas = snapshot.queue_quotas()
    if not quotas:
        return snapshot.jobs, {}
    usage = draining_use(snapshot.gpu_draining)  # (stopping runs hold their GPUs: quota_drain)
    for j in snapshot.jobs:
        if j.running:  # at the GPUs it holds: an elastic job may have grown or shrunk
            held_gpus = j.placement.num_gpus if j.placement is not None else j.spec.num_gpus
            usage[j.spec.queue] = usage.get(j.spec.queue, 0) + held_gpus
    admitted: list[JobView] = []
    held: dict[JobId, PendingReason] = {}
    for j in snapshot.jobs:
        q = quotas.get(j.spec.queue)
        if j.running or q is None:
            admitted.append(j)
            continue
        borrow = q.borrowing_limit_gpus
        limit = q.nominal_gpus + (borrow if borrow is not None else 1 << 30)
        used = usage.get(q.name, 0)
        if used + j.spec.num_gpus <= limit:
            usage[q.name] = used + j.spec.num_gpus
            admitted.append(j)
        else:
            held[j.job_id] = PendingReason(
                PendingKind.QUOTA, QuotaHeld(q.name, used, q.nominal_gpus, borrow,
                                             j.spec.num_gpus))
    return admitted, held


def decide(snapshot: Snapshot, policy: Policy, ctx: DecisionContext,
           options: PlacementOptions | None = None) -> Decision:
    """One round over ``snapshot`` (phases: module docstring), then CPUs and memory for a
    resource mode's gangs (:mod:`tessera.sched.resources`; ``repack=round``: Synergy's twin,
    every gang dealt again, GPUs too), then CPU-only jobs (cpu_stage)."""
    gpu_view, cpu_jobs = split_cpu_only(snapshot)  # (CPU-only jobs: their own stage, last)
    d = _gpu_stages(gpu_view, policy, ctx, options)
    d, y = give_way(snapshot, gpu_view, cpu_jobs, d,  # (cpu_yield: in-quota GPU jobs first)
                    lambda view: _gpu_stages(view, policy, ctx, options))
    if y is not None:
        cpu_jobs = tuple(j for j in cpu_jobs if j.job_id not in y.victims)
        d = replace(d, preempted=d.preempted + y.victims, notes={**d.notes, **y.notes()})
    return replace(d, **place_cpu_jobs(snapshot, cpu_jobs, d.placements, d.started,
                                       d.pending)._asdict()) if cpu_jobs else d


def _gpu_stages(gpu_view: Snapshot, policy: Policy, ctx: DecisionContext,
                options: PlacementOptions | None) -> Decision:
    """The GPU round, then a resource mode's CPUs and memory for its gangs."""
    d = _decide(gpu_view, policy, ctx, options)
    if policy.host_mode is None:
        return d
    if policy.host_repack == "round":
        return replace(d, **repack_round(gpu_view, d, policy.host_mode)._asdict())
    p, s, w = allocate_hosts(gpu_view, d.placements, d.started, d.pending, policy.host_mode,
                             ctx.solver)
    return replace(d, placements=p, started=s, pending=w)


def _decide(snapshot: Snapshot, policy: Policy, ctx: DecisionContext,
            options: PlacementOptions | None = None) -> Decision:
    """Run one scheduling round over ``snapshot`` (see the module docstring for the phases).

    Args:
        snapshot: the cluster and its jobs now (immutable).
        policy: the ranking policy.
        ctx: the driver's oracle, random stream, solver and layout cache
            (:class:`~tessera.sched.core.context.DecisionContext`); the only inputs that keep state.
        options: placement rules (locality wait, migration cost, mixed gangs, fill only).
    """
    opts = options or PlacementOptions()
    if opts.locality_wait_s > 0 and opts.largest_node_gpus is None:  # (needs_locality's)
        opts = replace(opts, largest_node_gpus=snapshot.cluster.max_gpus_local())
    d = _plain(snapshot, policy, ctx, opts)
    if opts.zeus is not None:  # per-job Zeus: each job at its own cost-minimising limit
        specs = {j.spec.job_id: j.spec for j in snapshot.jobs}
        d = replace(d, power_limits_w=zeus_limits(d.placements, specs, opts.zeus))
    if opts.power_budget is None:
        return d
    memo = ctx.caches.get(m := opts.power_budget.model, "power-levels", lambda: levels_for(m))
    return refill(snapshot, d, opts, Refill(policy, ctx, memo, within_budget,
                                            lambda view, o: _decide(view, policy, ctx, o)))


def _plain(
    snapshot: Snapshot, policy: Policy, ctx: DecisionContext, opts: PlacementOptions,
) -> Decision:
    """The round without a power budget (phases 1-5); ``opts`` sized for the cluster."""
    lap = _Laps()
    if needs_tenancy_round(snapshot.tenancy):  # cohorts, per-flavor quotas, fair sharing
        t = tenancy_round(snapshot, policy, ctx, opts, lap)
        return replace(_decision(t.ranking, t.placements, t.started, t.preempted, t.pending,
                                 lap, t.notes), fallbacks=t.fallbacks, wakeup_s=t.wakeup_s)

    # 1. Admission.
    admitted, held = _admit(snapshot)
    view = snapshot.with_jobs(tuple(admitted)) if held else snapshot
    lap("admit")

    # 2-5. Ordering, placement, preemption, reasons.
    if not policy.round_based and not policy.packs:
        d = _waiting_first(view, admitted, held, policy, ctx, opts, lap)
        if d is not None:
            return d
    return _full_round(view, admitted, held, policy, ctx, opts, lap)


def _waiting_first(
    view: Snapshot, admitted: Sequence[JobView], held: dict[JobId, PendingReason],
    policy: Policy, ctx: DecisionContext, opts: PlacementOptions, lap: _Laps,
) -> Decision | None:
    """An event-driven round that ranks the waiting jobs alone, or ``None`` when it cannot.

    If the waiting jobs all fit in the free GPUs (the common case), the running jobs' order
    cannot matter and the round costs O(waiting jobs); the same holds when the policy never
    preempts. Otherwise (someone is left over and the policy may preempt) everyone must be
    ranked to choose victims: ``None`` sends the caller to :func:`_full_round`.
    """
    now_s = view.now_s
    oracle = ctx.oracle.as_agnostic() if policy.agnostic else ctx.oracle
    free = FreeGpus.of_snapshot(view, ctx.layout(view.cluster))
    split = view.split()
    waiting = split.waiting
    ranking = policy.rank(PolicyContext(view.with_jobs(tuple(waiting)), oracle, ctx.rng,
                                        ctx.solver, ctx.caches))
    lap("order")
    if ranking.sizes:  # an elastic allocation sizes everyone: it needs the full round
        return None
    by_wait = {j.spec.job_id: j for j in waiting}
    new: dict[JobId, Placement] = {}
    backfill(ranking.candidates, by_wait, new, free, oracle, now_s, opts,
             Releases(admitted, now_s))
    if policy.preemptive and len(new) == len(waiting):
        never = ctx.stay_put.under(oracle, opts, len(admitted))
        upgrade(ctx.stay_put.unsettled(split), new, free, oracle, now_s, opts, never)
    lap("place")
    if len(new) < len(waiting) and policy.preemptive:
        return None
    lap("preempt")  # nothing to preempt: the waiting jobs fit, or the policy never does
    waits = dict(held)
    if len(new) < len(waiting):
        waits.update(_reasons([j for j in waiting if j.spec.job_id not in new], ranking,
                              ctx.oracle, free, now_s, opts))
    lap("explain")
    return _decision(ranking, _Placements(admitted, new), tuple(new), (), waits, lap)


def _full_round(
    view: Snapshot, admitted: Sequence[JobView], held: dict[JobId, PendingReason],
    policy: Policy, ctx: DecisionContext, opts: PlacementOptions, lap: _Laps,
) -> Decision:
    """Rank every admitted job and place them with the policy's strategy (rounds or events)."""
    now_s = view.now_s
    oracle = ctx.oracle.as_agnostic() if policy.agnostic else ctx.oracle
    free = FreeGpus.of_snapshot(view, ctx.layout(view.cluster))
    by_id = {j.spec.job_id: j for j in admitted}
    split = view.split()
    running = split.running
    ranking = policy.rank(PolicyContext(view, oracle, ctx.rng, ctx.solver, ctx.caches))
    lap("order")
    sized = by_id
    if ranking.sizes and view.queue_quotas():  # growth only within the queues' quotas
        capped = within_quotas(ranking.candidates, by_id, ranking.sizes, view.queue_quotas(),
                               draining_use(view.gpu_draining))
        ranking = replace(ranking, sizes=capped.sizes, notes={**ranking.notes, **capped.notes})
    if ranking.sizes:  # an elastic allocation: place each sized job at its chosen count
        admitted = sized_views(admitted, ranking.sizes)
        by_id = {j.spec.job_id: j for j in admitted}
    keep = not (policy.preemptive and not opts.fill_only)
    pairs = unpair(admitted, ranking, keep) if policy.packs else None
    if pairs is not None and pairs.riders:  # a running pair's GPUs are placed once
        placing = pairs.jobs
        placing_by_id = {j.spec.job_id: j for j in placing}
    else:
        placing, placing_by_id = admitted, by_id
    if policy.round_based:
        # A swap must earn its cost: a run that has not yet progressed that long stays put.
        lease = (leased(running, now_s, opts.migration_cost_s)
                 if not keep and not ranking.sizes else frozenset())
        run = place_rounds(ranking.candidates, placing_by_id, placing, free, oracle,
                           not keep, now_s, opts, lease)
    else:
        run = place_events(ranking.candidates, placing_by_id, placing, free, oracle, True,
                           now_s, opts)
        if len(run) == len(by_id):
            moved: dict[JobId, Placement] = {}
            never = ctx.stay_put.under(oracle, opts, len(admitted))
            upgrade(admitted if ranking.sizes else ctx.stay_put.unsettled(split), moved, free,
                    oracle, now_s, opts, never)
            run.update(moved)
    notes = ranking.notes
    if ranking.sizes:
        run = with_batches(run, sized, ranking.sizes)
    if pairs is not None:  # a packing policy's partners join their hosts' GPUs
        wish = partners_for(ranking, pairs.riders, keep)
        packed = colocate(run, wish, by_id, ctx.oracle.table, view.cluster)
        run, notes = packed.placements, {**ranking.notes, **packed.notes}
    lap("place")

    preempted = tuple(j.spec.job_id for j in running if j.spec.job_id not in run)
    started = tuple(
        jid for jid, p in run.items()
        if by_id[jid].placement is not p and (not by_id[jid].running or by_id[jid].placement != p)
    )
    lap("preempt")

    pending: dict[JobId, PendingReason] = dict(held)
    if len(run) < len(admitted):
        pending.update(_reasons([j for j in admitted if j.spec.job_id not in run], ranking,
                                ctx.oracle, free, now_s, opts))
    lap("explain")
    return _decision(ranking, run, started, preempted, pending, lap, notes)


def _decision(
    ranking: Ranking, placements: Mapping[JobId, Placement], started: tuple[JobId, ...],
    preempted: tuple[JobId, ...], pending: dict[JobId, PendingReason], lap: _Laps,
    notes: Mapping[JobId, str] | None = None,
) -> Decision:
    """The round's outcome, with the policy's memory, wish, notes and fallbacks."""
    return Decision(
        placements=placements,
        started=started,
        preempted=preempted,
        pending=pending,
        policy_state=ranking.state,
        wakeup_s=ranking.wakeup_s,
        notes=ranking.notes if notes is None else notes,
        fallbacks=ranking.fallbacks,
        phase_ms=tuple(lap.ms.items()), ranking=ranking)


class _Placements(Mapping[JobId, Placement]):
    """Every running job's placement after a round: the unchanged running gangs plus the new
    ones. Built lazily, so an event round that starts a few jobs does not copy every running
    job's placement."""

    def __init__(self, jobs: Sequence[JobView], new: dict[JobId, Placement]) -> None:
        self._jobs = jobs
        self._new = new
        self._all: dict[JobId, Placement] | None = None

    def _full(self) -> dict[JobId, Placement]:
        if self._all is None:
            full = {
                j.spec.job_id: j.placement
                for j in self._jobs
                if j.state is JobState.RUNNING and j.placement is not None
            }
            full.update(self._new)
            self._all = full
        return self._all

    def __getitem__(self, jid: JobId) -> Placement:
        p = self._new.get(jid)
        return p if p is not None else self._full()[jid]

    def __iter__(self) -> Iterator[JobId]:
        return iter(self._full())

    def __len__(self) -> int:
        return len(self._full())


def _reasons(jobs: list[JobView], ranking: Ranking, oracle: ThroughputOracle, free: FreeGpus,
             now_s: float, opts: PlacementOptions) -> dict[JobId, PendingReason]:
    """A reason for every job in ``jobs`` (all of them left waiting)."""
    local = {j.spec.job_id: needs_locality(j, now_s, opts) for j in jobs}
    no_plan = {j.spec.job_id: why for j in jobs
               if (why := mixed_no_plan(j, free, oracle, now_s, opts)) is not None}
    return pending_reasons(jobs, ranking.candidates, oracle, free, local, no_plan)


def within_budget(snapshot: Snapshot, d: Decision, budget: PowerBudget, oracle: ThroughputOracle,
                  memo: Levels | None = None, weights: Mapping[JobId, float] | None = None,
                  fast_only: bool = False) -> Decision:
    """Phase 6: ``d`` under ``budget``, jobs weighed by remaining time (or ``weights``), timed."""
    t0 = time.perf_counter()
    if weights is None:
        weights = power_weights(snapshot, d.placements, oracle, bool(d.pending))
    out = budget_stage(snapshot, d.placements, d.started, budget, memo, weights, oracle, fast_only)
    extra = (("power", (time.perf_counter() - t0) * 1e3),)
    if not out.held:
        return replace(d, power_limits_w=out.limits_w, phase_ms=d.phase_ms + extra)
    held = set(out.held)
    by_id = {j.spec.job_id: j for j in snapshot.jobs}
    pending = dict(d.pending)
    for jid in out.held:
        pending[jid] = held_reason(budget, out.power_w, by_id[jid], jid in out.for_fast)
    return replace(
        d, placements={k: p for k, p in d.placements.items() if k not in held},
        started=tuple(j for j in d.started if j not in held), pending=pending,
        power_limits_w=out.limits_w, phase_ms=d.phase_ms + extra)
