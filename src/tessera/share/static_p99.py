"""One static plan that meets p99 at every rate level, each under its own arrivals.

A plan sized for the busiest window under Poisson arrivals also meets p99 in every quieter window
under Poisson (less load, same shape). Under a trace's own arrivals that no longer holds: a quiet
window can be burstier than the busiest one (in the GenAI trace, windows at 68 % of the peak
rate have an inter-arrival coefficient of variation of 4.3; the peak windows 1.5), so the
peak-level plan misses p99 there. :func:`static_for_levels` sizes the one layout held all along
for every level: starting from the peak level's per-service rules, each service that misses p99
or the attainment target at *any* level gets one step tighter
(:func:`tessera.share.p99._tighten`), and the plan at the peak rates is redone, until every
level passes or the rounds run out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tessera.share.mig import MigGpu
from tessera.share.p99 import ArrivalModel, Knobs, P99Plan, _adjusted, _tighten, meets
from tessera.share.packing import plan_services
from tessera.share.plan import SharePlan
from tessera.share.profiles import BatchingRule, ProfileTable, Service
from tessera.share.serving_sim import simulate


@dataclass(frozen=True, slots=True)
class StaticPlan:
    """The static layout and its evidence: ``failing`` maps level -> services still missing."""

    plan: SharePlan
    knobs: dict[str, Knobs]
    rounds: int
    failing: dict[float, tuple[str, ...]]

    @property
    def meets(self) -> bool:
        return not self.failing


def static_for_levels(
    services: tuple[Service, ...], peak: P99Plan, per_level: dict[float, ArrivalModel],
    table: ProfileTable, gpu: MigGpu, rule: BatchingRule, *, target: float = 0.99,
    max_rounds: int = 24, util_floor: float = 0.5,
) -> StaticPlan:
    """The static plan for ``services`` (at their peak rates; level 1.0) that meets p99 at each
    level of ``per_level`` (a level scales every rate), starting from ``peak``'s rules."""
    knobs = dict(peak.knobs)
    by_name = {s.name: s for s in services}
    plan = peak.plan
    failing: dict[float, tuple[str, ...]] = {}
    for rnd in range(1, max_rounds + 1):
        if rnd > 1:
            planned = tuple(_adjusted(s, knobs[s.name], rule) for s in services)
            plan = replace(plan_services(planned, table, gpu, rule), services=services)
        failing = {}
        for lv, arrivals in sorted(per_level.items(), reverse=True):
            scaled = tuple(replace(s, rate_rps=s.rate_rps * lv) for s in services)
            sim = simulate(replace(plan, services=scaled), arrivals.streams(scaled), table,
                           seed=arrivals.seed)
            bad = tuple(o.service for o in sim.services if not meets(o, target))
            if bad:
                failing[lv] = bad
        if not failing or rnd == max_rounds:
            return StaticPlan(plan, dict(knobs), rnd, failing)
        for name in sorted({n for names in failing.values() for n in names}):
            knobs[name] = _tighten(by_name[name], knobs[name], table, gpu, rule, util_floor)
    raise AssertionError("unreachable: max_rounds >= 1")
