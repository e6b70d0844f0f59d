"""Load that changes: re-plan per window of a trace, paying for MIG reconfiguration.

MIG-serving's idea: as the request rate moves, move the MIG layout with it, instead of holding a
layout sized for the peak all day. This module compares three ways to serve the same services
over the windows of a request trace (:func:`compare_strategies`):

- ``peak``: one p99-checked plan (:func:`~tessera.share.p99.plan_for_p99`) sized for the
  busiest window, held throughout;
- ``replan-free``: a fresh p99-checked plan for each window, switched instantly;
- ``replan``: each window's layout reached from the previous one with few instances torn down
  (:func:`~tessera.share.replan.replan`; a fresh plan when the minimal-change one misses p99),
  at the cost of a MIG transition (:class:`ReconfigCost`).

**Rates.** A service's ``rate_rps`` is its rate in the trace's busiest window; in window ``w`` it
is ``rate_rps x count(w) / max count``, rounded *up* to a 10 % geometric grid (so plans repeat
and capacity never falls below the window's rate), at least 1 % of the peak.

**Transitions** (create before destroy, so no service drops below the replicas in flight): a
transition first creates the new instances and loads their model (also on instances that change
service or batch), then drains and destroys the old ones. GPUs work in parallel; on one GPU the
steps are sequential, so a transition lasts ``max over GPUs of (creates x create_s + loads x
load_s + destroys x destroy_s)``. It starts that long *before* the window (the rate of the next
window is taken as known: an oracle forecast, as MIG-serving plans for a predicted load), so the
new capacity is up when the window begins, and GPUs added or released are held, idle, for that
long: the transition's price in GPU-hours.

**Reconfiguration cost: source.** Neither ParvaGPU's data nor MIG-serving publish measured
GPU-instance create/destroy times (ParvaGPU's deploy script destroys and re-creates everything;
a MIG-serving author reports a Kubernetes exchange-and-compact transition cut from 30 min to
1 min, unverified; see ``docs/reference/gpu_sharing.md`` section 6). The defaults below are an
assumption to be replaced by a measurement; :func:`compare_strategies` is cheap to rerun at the
1-minute and 30-minute figures (the docs table does).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from tessera.errors import SpecError
from tessera.share.mig import MigGpu
from tessera.share.p99 import ArrivalModel, P99Plan, meets, plan_for_p99
from tessera.share.plan import SharePlan
from tessera.share.profiles import BatchingRule, ProfileTable, Service
from tessera.share.replan import Transition, replan
from tessera.share.serving_sim import simulate
from tessera.share.static_p99 import static_for_levels
from tessera.share.traces import RequestTrace
from tessera.share.window_arrivals import level_arrivals

OWN_UTIL_FLOOR = 0.2  # lowest utilisation cap when sizing for a trace's own arrivals
OWN_ROUNDS = 24
GRID = 1.1  # rate levels: powers of 1.1 of the peak (rounded up)
MIN_LEVEL = 0.01


@dataclass(frozen=True, slots=True)
class ReconfigCost:
    """Seconds per MIG step on one GPU (assumed defaults; see the module docstring).

    Attributes:
        create_s: create one GPU instance and its compute instance.
        destroy_s: destroy one (after its requests drained).
        load_s: start the model's MPS processes on an instance (new, reassigned or re-tuned).
        flat_s: if set, every transition takes this long regardless of its steps (e.g. the
            60 s Kubernetes transition a MIG-serving author reports).
    """

    create_s: float = 2.0
    destroy_s: float = 1.0
    load_s: float = 10.0
    flat_s: float | None = None

    def __post_init__(self) -> None:
        if min(self.create_s, self.destroy_s, self.load_s, self.flat_s or 0.0) < 0:
            raise SpecError("reconfiguration times must be >= 0 s")


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """One strategy over the whole trace."""

    name: str
    gpu_hours: float
    transition_gpu_hours: float
    peak_gpus: int
    transitions: int
    instance_changes: int
    attainment: float  # request-weighted over windows and services
    violating_windows: int  # windows in which some service missed p99 or the target
    replan_s_max: float = 0.0


@dataclass(frozen=True, slots=True)
class Comparison:
    window_h: float
    windows: int
    levels: int
    strategies: tuple[StrategyResult, ...]

    def get(self, name: str) -> StrategyResult:
        return next(s for s in self.strategies if s.name == name)

    @property
    def saving_vs_peak(self) -> float:
        """Fraction of the peak plan's GPU-hours that re-planning (with cost) saves."""
        return 1.0 - self.get("replan").gpu_hours / self.get("peak").gpu_hours


def window_levels(trace: RequestTrace, window_h: float) -> np.ndarray:
    """Each window's load as a fraction of the busiest window, rounded up on the grid."""
    counts = trace.window_counts(window_h * 3600.0).astype(float)
    frac = np.maximum(counts / counts.max(), MIN_LEVEL)
    steps = np.ceil(np.log(frac) / math.log(GRID) - 1e-9)
    return np.minimum(GRID ** steps, 1.0)


def _scaled(services: tuple[Service, ...], level: float) -> tuple[Service, ...]:
    return tuple(replace(s, rate_rps=s.rate_rps * level) for s in services)


def transition_s(tr: Transition, cost: ReconfigCost) -> float:
    """How long a transition takes: the slowest GPU's sequential steps."""
    if cost.flat_s is not None:
        return cost.flat_s if tr.changes else 0.0
    per_gpu: dict[int, float] = {}
    step = {"create": cost.create_s + cost.load_s, "reassign": cost.load_s,
            "retune": cost.load_s, "destroy": cost.destroy_s}
    for c in tr.changes:
        per_gpu[c.gpu] = per_gpu.get(c.gpu, 0.0) + step[c.action]
    return max(per_gpu.values(), default=0.0)


def moved_gpus(old: SharePlan, tr: Transition) -> int:
    """GPUs added plus GPUs released by a transition: each is held, idle, while it runs.

    New GPUs are the indices past the old plan's; an old GPU is released when every instance
    on it is destroyed and nothing is created, reassigned or re-tuned there."""
    added = len({c.gpu for c in tr.changes if c.gpu >= old.gpus_used})
    released = 0
    for g, ga in enumerate(old.gpus):
        mine = [c for c in tr.changes if c.gpu == g]
        destroyed = sum(c.action == "destroy" for c in mine)
        if destroyed == len(ga.instances) and all(c.action == "destroy" for c in mine):
            released += 1
    return added + released


def _full_rebuild(old: SharePlan, new: SharePlan) -> Transition:
    """Tear everything down and create the new plan (on fresh GPUs, create before destroy)."""
    from tessera.share.replan import Change  # lazy: only the fallback needs it

    changes = [Change("create", old.gpus_used + g, str(i.placement), i.segment.service)
               for g, ga in enumerate(new.gpus) for i in ga.instances]
    changes += [Change("destroy", g, str(i.placement), i.segment.service)
                for g, ga in enumerate(old.gpus) for i in ga.instances]
    return Transition(new, tuple(changes), new.gpus_used)


def compare_strategies(
    services: tuple[Service, ...], trace: RequestTrace, table: ProfileTable, gpu: MigGpu,
    rule: BatchingRule, *, window_h: float = 1.0, cost: ReconfigCost | None = None,
    arrivals: ArrivalModel | None = None, target: float = 0.99, own_arrivals: bool = False,
) -> Comparison:
    """Peak-sized, re-planned without cost and re-planned with cost, over ``trace``'s windows
    (services' rates are their peak-window rates; see the module docstring).

    ``own_arrivals``: size and check each rate level under the trace's own inter-arrivals in
    the windows at that level (:func:`~tessera.share.window_arrivals.level_arrivals`, at least
    ``arrivals.requests_per_service`` requests per service) instead of ``arrivals``."""
    if window_h <= 0:
        raise SpecError(f"window must be > 0 h, got {window_h:g}")
    cost = cost or ReconfigCost()
    arrivals = arrivals or ArrivalModel(requests_per_service=5_000)
    levels = window_levels(trace, window_h)
    per_level: dict[float, ArrivalModel] = {lv: arrivals for lv in set(levels.tolist())}
    if own_arrivals:
        per_level = level_arrivals(trace, window_h, levels,
                                   min_requests=arrivals.requests_per_service,
                                   seed=arrivals.seed)
    # bursty arrivals may need more headroom than the Poisson default allows (floor 0.5)
    floor, rounds = (OWN_UTIL_FLOOR, OWN_ROUNDS) if own_arrivals else (0.5, 12)
    fresh: dict[float, P99Plan] = {}
    for lv in sorted(set(levels.tolist()), reverse=True):
        fresh[lv] = plan_for_p99(_scaled(services, lv), table, gpu, rule,
                                 arrivals=per_level[lv], target=target, util_floor=floor,
                                 max_rounds=rounds)
    peak_plan = fresh[max(fresh)].plan
    if own_arrivals:  # the held plan must meet p99 in every window's own arrivals too
        peak_plan = static_for_levels(services, fresh[max(fresh)], per_level, table, gpu, rule,
                                      target=target, max_rounds=rounds, util_floor=floor).plan
    w_h = window_h
    results = [
        _static("peak", peak_plan, levels, services, table, per_level, target, w_h),
        _free(fresh, levels, w_h, target),
        _with_cost(fresh, levels, services, table, gpu, rule, per_level, target, w_h, cost),
    ]
    return Comparison(window_h, len(levels), len(fresh), tuple(results))


def _weighted(items: list[tuple[float, float]]) -> float:
    total = sum(w for _, w in items)
    return sum(a * w for a, w in items) / total if total else 1.0


def _check(plan: SharePlan, services: tuple[Service, ...], arrivals: ArrivalModel,
           table: ProfileTable, target: float) -> tuple[float, bool]:
    sim = simulate(replace(plan, services=services), arrivals.streams(services), table,
                   seed=arrivals.seed)
    return sim.attainment, all(meets(o, target) for o in sim.services)


def _static(name: str, plan: SharePlan, levels: np.ndarray, services: tuple[Service, ...],
            table: ProfileTable, arrivals: dict[float, ArrivalModel], target: float,
            w_h: float) -> StrategyResult:
    seen: dict[float, tuple[float, bool]] = {}
    att, bad = [], 0
    for lv in levels.tolist():
        if lv not in seen:
            seen[lv] = _check(plan, _scaled(services, lv), arrivals[lv], table, target)
        a, ok = seen[lv]
        att.append((a, lv))
        bad += not ok
    return StrategyResult(name, plan.gpus_used * w_h * len(levels), 0.0, plan.gpus_used, 0, 0,
                          _weighted(att), bad)


def _free(fresh: dict[float, P99Plan], levels: np.ndarray, w_h: float,
          target: float) -> StrategyResult:
    plans = [fresh[lv] for lv in levels.tolist()]
    switches = sum(1 for a, b in pairwise(plans) if a is not b)
    return StrategyResult(
        "replan-free", sum(p.plan.gpus_used for p in plans) * w_h, 0.0,
        max(p.plan.gpus_used for p in plans), switches, 0,
        _weighted([(p.sim.attainment, lv) for p, lv in zip(plans, levels.tolist(),
                                                           strict=True)]),
        sum(not p.meets for p in plans),
    )


def _with_cost(
    fresh: dict[float, P99Plan], levels: np.ndarray, services: tuple[Service, ...],
    table: ProfileTable, gpu: MigGpu, rule: BatchingRule, arrivals: dict[float, ArrivalModel],
    target: float, w_h: float, cost: ReconfigCost,
) -> StrategyResult:
    lv_list = levels.tolist()
    cur = fresh[lv_list[0]].plan
    gpu_h = trans_h = 0.0
    transitions = changes = bad = 0
    peak = cur.gpus_used
    att: list[tuple[float, float]] = []
    worst_s = 0.0
    for k, lv in enumerate(lv_list):
        if k > 0 and lv != lv_list[k - 1]:
            target_plan = fresh[lv]
            adjusted = tuple(
                Service(s.name, s.model,
                        s.rate_rps * rule.max_utilization
                        / target_plan.knobs[s.name].max_utilization,
                        s.slo_ms * target_plan.knobs[s.name].latency_fraction
                        / rule.latency_fraction)
                for s in target_plan.plan.services)
            t0 = time.perf_counter()
            tr = replan(cur, adjusted, table, gpu, rule)
            worst_s = max(worst_s, time.perf_counter() - t0)
            scaled = _scaled(services, lv)
            _, ok = _check(tr.plan, scaled, arrivals[lv], table, target)
            if not ok or tr.plan.gpus_used > target_plan.plan.gpus_used + 1:
                tr = _full_rebuild(cur, target_plan.plan)
            trans_h += moved_gpus(cur, tr) * transition_s(tr, cost) / 3600.0
            transitions += 1
            changes += len(tr.changes)
            cur = replace(tr.plan, services=_scaled(services, lv))
        a, ok = _check(cur, _scaled(services, lv), arrivals[lv], table, target)
        att.append((a, lv))
        bad += not ok
        gpu_h += cur.gpus_used * w_h
        peak = max(peak, cur.gpus_used)
    return StrategyResult("replan", gpu_h + trans_h, trans_h, peak, transitions, changes,
                          _weighted(att), bad, worst_s)
