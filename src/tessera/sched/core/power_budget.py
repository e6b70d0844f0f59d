"""The power-budget stage: after the policy decides, keep the cluster under a power budget.

A datacentre row has a power budget, not just GPUs. With a budget
(:class:`PowerBudget`, ``tessera simulate --power-budget-kw``) every round ends with this
stage, pure over the snapshot and the round's placements, whatever the policy:

1. **Measure.** Cluster power is every running gang's GPUs at their draw plus every other
   GPU at its idle draw (:class:`~tessera.perf.power.PowerModel`). Under budget: every job
   runs at its flavor's maximum limit and nothing changes.
2. **Cap where it costs least (PowerFlow's idea).** Over budget, lower power limits one step
   at a time, each time on the job whose next step loses the least throughput per watt saved
   (each GPU's throughput relative to the job's uncapped speed: a gang's throughput is its
   GPUs'). Jobs near the top of their curve, where a watt buys little speed, are capped
   first, so the limits spread evenly over boards of one shape and every job keeps as much
   of its speed as the budget allows. Each job's throughput is weighted by how much a watt
   is worth to it (:mod:`tessera.sched.core.power_weights`): while jobs queue, short jobs
   keep their power and long ones (in GPU-seconds) are capped first (SRPT's rule, with the
   budget as the shared machine); with nobody waiting a job weighs one over its GPU count (a
   cap lasts only until the next decision lifts it, so it costs each job about the same
   time, and a gang saves its GPU count times the watts).
3. **Wait.** Still over with every job at its lowest limit: the jobs this round would start
   wait instead (lightest first, then last-ranked; reason: power) until the rest fit.

Two options (:class:`~tessera.sched.core.power_options.PowerBudget`): ``wait_for_fast``
first holds back starts on a far slower board when a fast one frees soon
(:mod:`~tessera.sched.core.power_displace`), and mode ``exact`` solves step 2 exactly, as a
multiple-choice knapsack (:mod:`~tessera.sched.core.power_exact`; the greedy past its limits).

Power changes only when a gang starts, stops or changes its limit, and the simulator applies a
round's limits before anything else happens, so a cluster kept under budget at each round is
under it at every instant in between (a completion only lowers power).

**Uniform capping** (``mode="uniform"``), the baseline, is what an operator does without a
scheduler's help: one limit, the same fraction of each board's maximum for every GPU, chosen
once so the whole cluster busy at that limit fits the budget; jobs wait only if even that does
not fit.

Limits are returned only for capped jobs: a running job absent from
:attr:`BudgetOutcome.limits_w` runs at its flavor's maximum. A mixed gang (several flavors)
is measured but never capped.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.perf.power import PowerModel
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.power_displace import displaced
from tessera.sched.core.power_exact import LimitClass, solve_classes
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.reasons import PendingKind, PendingReason, PowerHeld
from tessera.sched.core.snapshot import JobView, Placement, Snapshot

__all__ = ["BudgetOutcome", "Levels", "PowerBudget", "budget_stage", "cluster_power_w",
           "levels_for"]


@dataclass(frozen=True, slots=True)
class BudgetOutcome:
    """What the stage changed in a round.

    Attributes:
        limits_w: the power limit per capped running job (absent: the flavor's maximum).
        held: jobs the round would have started that wait for power instead.
        power_w: cluster power after the stage, in watts.
        for_fast: those of ``held`` that wait for a faster board (``wait_for_fast``).
    """

    limits_w: Mapping[JobId, float]
    held: tuple[JobId, ...]
    power_w: float
    for_fast: tuple[JobId, ...] = ()


_Key = tuple[str, str | None, GpuFlavor]
_Table = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]
"""Limits from the maximum down, the draw per GPU at each, the relative speed at each."""


class Levels:
    """Per (job type, model, flavor): the limits from the maximum down, with each limit's
    draw per GPU and relative speed (1 / step-time factor); limits above what the job draws
    uncapped are left out (they would change nothing)."""

    def __init__(self, model: PowerModel) -> None:
        self.model = model
        self._memo: dict[_Key, _Table] = {}
        self._idle: dict[GpuFlavor, float] = {}

    def of(self, job: JobView, flavor: GpuFlavor) -> _Table:
        """The limits, draws and relative speeds of ``job`` on ``flavor``."""
        return self.of_key((job.spec.job_type, job.spec.model, flavor))

    def of_key(self, key: _Key) -> _Table:
        """As :meth:`of`, by (job type, model, flavor)."""
        got = self._memo.get(key)
        if got is None:
            flavor = key[2]
            limits = tuple(reversed(self.model.limit_range(flavor).limits_w()))
            ests = [self.model.estimate(key[0], key[1], flavor, w) for w in limits]
            keep = [0]  # a lower limit the job does not reach saves nothing: skipped
            for i in range(1, len(ests)):
                if ests[i].avg_power_w < ests[keep[-1]].avg_power_w:
                    keep.append(i)
            limits = tuple(limits[i] for i in keep)
            ests = [ests[i] for i in keep]
            got = (limits, tuple(e.avg_power_w for e in ests),
                   tuple(1.0 / e.step_time_factor for e in ests))
            self._memo[key] = got
        return got

    def idle_w(self, flavor: GpuFlavor) -> float:
        got = self._idle.get(flavor)
        if got is None:
            got = self._idle[flavor] = self.model.idle_power_w(flavor)
        return got


def cluster_power_w(
    snapshot: Snapshot, placements: Mapping[JobId, Placement], model: PowerModel,
    limits_w: Mapping[JobId, float] | None = None,
) -> float:
    """Cluster power with ``placements`` running at ``limits_w`` (absent: maximum), in watts."""
    levels = Levels(model)
    by_id = {j.spec.job_id: j for j in snapshot.jobs}
    return _power(snapshot, placements, by_id, levels, limits_w or {})


def _power(snapshot: Snapshot, placements: Mapping[JobId, Placement],
           by_id: Mapping[JobId, JobView], levels: Levels,
           limits_w: Mapping[JobId, float]) -> float:
    idle_gpus: dict[GpuFlavor, int] = {}
    for n in snapshot.cluster.nodes:
        idle_gpus[n.flavor] = idle_gpus.get(n.flavor, 0) + n.gpus
    total = 0.0
    for jid, p in placements.items():
        job = by_id[jid]
        for fl, g in _gpus_by_flavor(p, snapshot):
            idle_gpus[fl] -= g
            lim = limits_w.get(jid)
            if lim is None:
                total += g * levels.of(job, fl)[1][0]
            else:
                total += g * levels.model.estimate(job.spec.job_type, job.spec.model, fl,
                                                   lim).avg_power_w
    return total + sum(max(n, 0) * levels.idle_w(fl) for fl, n in idle_gpus.items())


def _gpus_by_flavor(p: Placement, snapshot: Snapshot) -> list[tuple[GpuFlavor, int]]:
    if not p.node_flavors:
        return [(p.flavors[0], p.num_gpus)]
    return list(zip(p.node_flavors, (k for _n, k in p.gpus_by_node), strict=True))


def levels_for(model: PowerModel) -> Levels:
    """A fresh memo of ``model``'s limits, draws and speeds (a driver keeps one between
    rounds: :class:`~tessera.sched.core.context.PolicyCaches`)."""
    return Levels(model)


def budget_stage(
    snapshot: Snapshot, placements: Mapping[JobId, Placement], started: tuple[JobId, ...],
    budget: PowerBudget, memo: Levels | None = None,
    weights: Mapping[JobId, float] | None = None, oracle: ThroughputOracle | None = None,
    fast_only: bool = False, remaining: Mapping[JobId, float] | None = None,
) -> BudgetOutcome:
    """Choose power limits (and, if still over, which of ``started`` wait) so the cluster
    draws at most ``budget.budget_w`` with ``placements`` (see the module docstring).

    ``started`` is in the policy's order; only jobs that were not running before the round
    can be held back (a running gang is never stopped for power: it fit at its last round
    and power has not risen since). ``memo`` (from :func:`levels_for` on the same model)
    keeps the model's answers between rounds. ``weights`` (per placed job, from
    :func:`~tessera.sched.core.power_weights.power_weights`) scale each job's throughput in
    the flow stage: caps go to the lightest jobs first, and jobs held for lack of power are
    the lightest first (ties: last-ranked first). Without them every job weighs the same
    and the held jobs are the last-ranked. Uniform capping ignores them. With
    ``budget.wait_for_fast`` and an ``oracle`` (the policy's rates), a start on a far slower
    board waits first for a fast board a running job frees soon
    (:mod:`~tessera.sched.core.power_displace`). ``fast_only`` (with ``wait_for_fast``)
    stops once those holds are chosen, if any (no limits, no holds for power; ``power_w`` is
    the round's before them; ``weights`` unused): :mod:`~tessera.sched.core.power_refill`
    then places the round again without them and runs the whole stage, rule off.
    ``remaining``: the placed jobs' seconds left, if known (for the rule).
    """
    weights = weights if budget.mode != "uniform" else None
    levels = memo if memo is not None and memo.model is budget.model else Levels(budget.model)
    by_id = {j.spec.job_id: j for j in snapshot.jobs}
    if budget.mode == "uniform":
        limits = _uniform(snapshot, placements, by_id, levels, budget.budget_w)
    else:
        limits = {}
    power = _power(snapshot, placements, by_id, levels, limits)
    if power <= budget.budget_w:
        return BudgetOutcome(limits, (), power)
    kept = dict(placements)
    held: list[JobId] = []
    if budget.wait_for_fast and oracle is not None and budget.mode != "uniform":
        for jid in displaced(snapshot, kept, started, oracle, by_id=by_id, remaining=remaining):
            del kept[jid]
            held.append(jid)
        fast = tuple(held)
        if fast_only:  # (power_w: the round's before the holds)
            return BudgetOutcome(limits, fast, power, fast)
        if held:
            power = _power(snapshot, kept, by_id, levels, limits)
            if power <= budget.budget_w:
                return BudgetOutcome(limits, fast, power, fast)
    else:
        fast = ()
    got = (_exact(snapshot, kept, by_id, levels, power, budget.budget_w, weights or {})
           if budget.mode == "exact" else None)
    if got is not None:
        limits, power = got
    elif budget.mode != "uniform":  # flow, or exact past its time limit / infeasible
        limits, power = _flow(snapshot, kept, by_id, levels, power, budget.budget_w,
                              weights or {})
    if power > budget.budget_w:
        order = [j for j in reversed(started) if j in kept and not by_id[j].running]
        if weights is not None:  # the lightest waits first (stable: last-ranked first)
            order.sort(key=lambda j: weights.get(j, 1.0))
        for jid in order:
            if power <= budget.budget_w:
                break
            del kept[jid]
            held.append(jid)
            limits.pop(jid, None)
            power = _power(snapshot, kept, by_id, levels, limits)
    return BudgetOutcome(limits, tuple(held), power, fast)


def held_reason(budget: PowerBudget, power_w: float, job: JobView,
                for_fast: bool = False) -> PendingReason:
    """Why ``job`` waits for power (``for_fast``: for a faster board, ``wait_for_fast``)."""
    return PendingReason(PendingKind.CAPACITY,
                         PowerHeld(job.spec.num_gpus, budget.budget_w, power_w, for_fast))


def _uniform(snapshot: Snapshot, placements: Mapping[JobId, Placement],
             by_id: Mapping[JobId, JobView], levels: Levels,
             budget_w: float) -> dict[JobId, float]:
    """One fraction of every board's maximum: the highest on a 5 % grid at which the whole
    cluster, every GPU busy at it, fits ``budget_w`` (the lowest limit if none does)."""
    frac = 1.0
    model = levels.model
    while frac > 0.0:
        full = 0.0
        for n in snapshot.cluster.nodes:
            rng = model.limit_range(n.flavor)
            lim = min(max(frac * rng.max_w, rng.min_w), rng.max_w)
            full += n.gpus * model.estimate("", None, n.flavor, lim).avg_power_w
        if full <= budget_w or frac * 1.0 <= 0.05:
            break
        frac = round(frac - 0.05, 10)
    out: dict[JobId, float] = {}
    for jid, p in placements.items():
        if p.node_flavors:
            continue
        rng = model.limit_range(p.flavors[0])
        lim = min(max(frac * rng.max_w, rng.min_w), rng.max_w)
        if lim < rng.max_w:
            out[jid] = lim
    return out


def _flow(snapshot: Snapshot, placements: Mapping[JobId, Placement],
          by_id: Mapping[JobId, JobView], levels: Levels, power_w: float,
          budget_w: float, weights: Mapping[JobId, float],
) -> tuple[dict[JobId, float], float]:
    """Lower limits one step at a time where the weighted throughput lost per watt saved is
    least (each job's relative throughput times its weight); returns the limits and the power.

    The loss per watt of a step depends on the job's (type, model, flavor), its weight
    (absent: 1) and its level only, not on its GPU count (both scale with it), so the jobs
    of one kind and weight step down together: a heap over the kinds' next steps, and the
    last step taken job by job (in placement order) only as far as the budget needs. Same
    choice as a heap over every job's steps, at the cost of the kinds rather than the jobs.
    """
    groups: dict[tuple[_Key, float], list[tuple[JobId, int]]] = {}
    for jid, p in placements.items():
        if p.node_flavors:
            continue
        spec = by_id[jid].spec
        groups.setdefault(((spec.job_type, spec.model, p.flavors[0]), weights.get(jid, 1.0)),
                          []).append((jid, p.num_gpus))
    heap: list[tuple[float, int, tuple[_Key, float]]] = []
    tables = {}
    at: dict[tuple[_Key, float], int] = {}
    gpus: dict[tuple[_Key, float], int] = {}
    for order, (gk, members) in enumerate(groups.items()):
        tables[gk] = levels.of_key(gk[0])
        at[gk] = 0
        gpus[gk] = sum(g for _j, g in members)
        cost = _step_cost(tables[gk], 0)
        if cost is not None:
            heap.append((cost * gk[1], order, gk))
    heapq.heapify(heap)
    limits: dict[JobId, float] = {}
    while power_w > budget_w and heap:
        _cost, order, gk = heapq.heappop(heap)
        lims, draws, _speeds = tables[gk]
        i = at[gk]
        step_w = draws[i] - draws[i + 1]
        if power_w - gpus[gk] * step_w > budget_w:
            power_w -= gpus[gk] * step_w
            at[gk] = i + 1
            nxt = _step_cost(tables[gk], i + 1)
            if nxt is not None:
                heapq.heappush(heap, (nxt * gk[1], order, gk))
            continue
        for jid, g in groups[gk]:  # the last step: job by job, only as far as needed
            limits[jid] = lims[i + 1]
            power_w -= g * step_w
            if power_w <= budget_w:
                break
    for gk, i in at.items():
        if i > 0:
            lim = tables[gk][0][i]
            for jid, _g in groups[gk]:
                limits.setdefault(jid, lim)
    return limits, power_w


_ClassKey = tuple[_Key, float, int]


def limit_classes(
    snapshot: Snapshot, placements: Mapping[JobId, Placement], levels: Levels,
    weights: Mapping[JobId, float],
) -> tuple[list[LimitClass], list[list[JobId]], list[tuple[float, ...]]]:
    """The stage's problem as classes of interchangeable jobs (same type, model, flavor,
    weight and GPU count; mixed gangs are left out): the classes, their members in placement
    order, and each class's limits from the top down (:mod:`~.power_exact`)."""
    by_id = {j.spec.job_id: j for j in snapshot.jobs}
    members: dict[_ClassKey, list[JobId]] = {}
    for jid, p in placements.items():
        if p.node_flavors:
            continue
        spec = by_id[jid].spec
        ck = ((spec.job_type, spec.model, p.flavors[0]), weights.get(jid, 1.0), p.num_gpus)
        members.setdefault(ck, []).append(jid)
    classes, lims = [], []
    for (key, w, g), jids in members.items():
        limits, draws, speeds = levels.of_key(key)
        classes.append(LimitClass(len(jids), tuple(w * g * (speeds[0] - s) for s in speeds),
                                  tuple(g * d for d in draws)))
        lims.append(limits)
    return classes, list(members.values()), lims


def _exact(snapshot: Snapshot, placements: Mapping[JobId, Placement],
           by_id: Mapping[JobId, JobView], levels: Levels, power_w: float,
           budget_w: float, weights: Mapping[JobId, float],
) -> tuple[dict[JobId, float], float] | None:
    """The least weighted loss under ``budget_w``, solved exactly (``None``: the solver gave
    no proven optimum in time, or even the lowest limits do not fit)."""
    classes, members, lims = limit_classes(snapshot, placements, levels, weights)
    top_w = sum(cl.count * cl.watts[0] for cl in classes)
    counts = solve_classes(classes, budget_w - (power_w - top_w))
    if counts is None:
        return None
    limits: dict[JobId, float] = {}
    for row, jids, lim in zip(counts, members, lims, strict=True):
        it = iter(jids)
        for level, n in enumerate(row):
            for _ in range(n):
                jid = next(it)
                if level > 0:
                    limits[jid] = lim[level]
    return limits, _power(snapshot, placements, by_id, levels, limits)


def _step_cost(table: _Table, i: int) -> float | None:
    """Relative GPU-throughput lost per watt saved by the step from level ``i`` to ``i + 1``
    (``None``: no lower level)."""
    _lims, draws, speeds = table
    if i + 1 >= len(draws):
        return None
    saved = draws[i] - draws[i + 1]
    lost = speeds[i] - speeds[i + 1]
    if saved <= 0:
        return float("inf") if lost > 0 else 0.0
    return lost / saved
