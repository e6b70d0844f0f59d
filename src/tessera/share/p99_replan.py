"""Re-plans checked at p99: the minimal-change re-planner, verified by the serving simulation.

:func:`~tessera.share.replan.replan` moves a running layout to new rates with few instances torn
down, under the profile model (the proxy rule), so its layout can miss an SLO at p99 just as a
fresh proxy plan can. :func:`replan_for_p99` closes the same loop as
:func:`~tessera.share.p99.plan_for_p99`:

1. re-plan from the old layout for the services, each under its per-service rule (utilisation
   cap and batch budget; the plain rule at first, or the rules a previous check settled on);
2. replay the arrival process against the new layout with the serving simulation;
3. each failing service gets one step tighter (:func:`tessera.share.p99._tighten`) and the
   re-plan is redone from the *old* layout, so the Transition stays a single move;
4. until every service passes or the rounds run out; the result then names the failing services
   (:meth:`P99Replan.failing`), so a caller never applies a missing layout silently.

The live inference service (:mod:`tessera.live.inference.manager`) uses it for every re-plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from tessera.share.mig import MigGpu
from tessera.share.p99 import ArrivalModel, Checked, Knobs, _adjusted, _tighten, meets
from tessera.share.plan import SharePlan
from tessera.share.profiles import BatchingRule, ProfileTable, Service
from tessera.share.replan import Transition, replan
from tessera.share.serving_sim import SimResult, simulate


@dataclass(frozen=True, slots=True)
class P99Replan(Checked):
    """A re-plan checked at p99, with the evidence.

    Attributes:
        transition: the move from the old layout (its plan carries the user's services).
        sim: the simulation of the new layout under ``arrivals``.
        knobs: the per-service rule of the new layout.
        rounds: re-plan-and-simulate rounds run.
        target: the attainment each service had to reach.
        cpu_s: CPU seconds the whole loop took (``time.process_time``).
    """

    transition: Transition
    sim: SimResult
    knobs: dict[str, Knobs]
    rounds: int
    target: float
    cpu_s: float


def replan_for_p99(
    old: SharePlan,
    services: tuple[Service, ...],
    table: ProfileTable,
    gpu: MigGpu,
    rule: BatchingRule,
    *,
    arrivals: ArrivalModel | None = None,
    target: float = 0.99,
    max_rounds: int = 12,
    knobs: dict[str, Knobs] | None = None,
) -> P99Replan:
    """Re-plan ``old`` for ``services`` until every service meets p99 and ``target`` in the
    simulation (see the module docstring). ``knobs``: per-service rules to start from (a
    service without one starts from ``rule``)."""
    t0 = time.process_time()
    arrivals = arrivals or ArrivalModel()
    streams = arrivals.streams(services)
    start = knobs or {}
    cur = {s.name: start.get(s.name, Knobs(rule.latency_fraction, rule.max_utilization))
           for s in services}
    by_name = {s.name: s for s in services}
    rounds = 0
    while True:
        rounds += 1
        planned = tuple(_adjusted(s, cur[s.name], rule) for s in services)
        tr = replan(old, planned, table, gpu, rule)
        tr = replace(tr, plan=replace(tr.plan, services=services))
        sim = simulate(tr.plan, streams, table, seed=arrivals.seed)
        bad = [o for o in sim.services if not meets(o, target)]
        if not bad or rounds >= max_rounds:
            return P99Replan(tr, sim, dict(cur), rounds, target, time.process_time() - t0)
        for o in bad:
            cur[o.service] = _tighten(by_name[o.service], cur[o.service], table, gpu, rule)
