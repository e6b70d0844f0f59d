"""Energy-aware GPU-type choice, and per-job Zeus power limits (issue 34, part 3b).

Zeus (NSDI'23) tunes one job on the GPU it was given: it picks the power limit minimising

    cost = η · energy + (1 − η) · MAXPOWER · time

(η ∈ [0, 1] weighs energy against time; MAXPOWER turns time into watts so both terms are in
joules). On a mixed cluster the GPU *type* matters more than the limit: a job's energy to
finish differs by type as much as its speed does (a ResNet-18 step on a K80 takes ~10× a
V100's time at half the power: ~5× the energy), and a scheduler that places by speed alone,
or on whatever is free, spends it.

* :class:`ZeusCost` prices one step of a job on a flavor at its best limit (the limit Zeus's
  just-in-time profiling converges to, read here from the power model) and gives that limit.
  MAXPOWER is one number for the whole cluster (the largest maximum limit of its flavors), so
  the time term does not favour a type for its smaller board.
* :func:`zeus_limits` is **per-job Zeus**: each running job at its cost-minimising limit on the
  flavor its policy chose (the baseline).
* :class:`EnergyAware` wraps any policy: it keeps the policy's order of jobs, but offers each
  job its flavors cheapest first by that cost, and drops a flavor costing more than
  ``1 + slack`` times the job's cheapest one -- the job waits for a better type rather than
  run where it burns the most (waiting is not priced by Zeus's cost; the benchmark reports
  the JCT it costs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec
from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.core.power_options import ZeusCost
from tessera.sched.core.snapshot import Placement

__all__ = ["EnergyAware", "ZeusCost", "energy_aware", "zeus_limits"]


def zeus_limits(placements: Mapping[JobId, Placement], specs: Mapping[JobId, JobSpec],
                cost: ZeusCost) -> dict[JobId, float]:
    """Per-job Zeus: each homogeneous gang at its cost-minimising limit on its flavor
    (only the capped ones are listed; a mixed gang runs uncapped)."""
    out: dict[JobId, float] = {}
    for jid, p in placements.items():
        if p.node_flavors:
            continue
        lim, _c, capped = cost.best(specs[jid], p.flavors[0])
        if capped:
            out[jid] = lim
    return out


class EnergyAware(Policy):
    """A policy's ranking with each job's flavors reordered by Zeus's cost (see the module
    docstring). Built by :func:`energy_aware`, which copies the base policy's class traits."""

    def __init__(self, base: Policy, cost: ZeusCost, slack: float) -> None:
        super().__init__(base.config, base.agnostic, base.name)
        self.base = base
        self.cost = cost
        self.slack = slack
        self.spec_options = base.spec_options  # (results are labelled by the base policy)

    def rank(self, ctx: PolicyContext) -> Ranking:
        r = self.base.rank(ctx)
        specs = {j.spec.job_id: j.spec for j in ctx.snapshot.jobs}
        flavors: dict[JobId, list[GpuFlavor]] = {}
        for jid, fl in r.candidates:
            flavors.setdefault(jid, []).append(fl)
        out: list[tuple[JobId, GpuFlavor]] = []
        for jid, fls in flavors.items():
            spec = specs[jid]
            rates = {fr.flavor: fr.consolidated for fr in ctx.oracle.real_rates(spec)}
            priced = sorted(((self.cost.per_step(spec, fl, rates.get(fl, 0.0)), i, fl)
                             for i, fl in enumerate(fls)), key=lambda t: (t[0], t[1]))
            cheapest = priced[0][0]
            out += [(jid, fl) for c, _i, fl in priced
                    if c <= cheapest * (1.0 + self.slack) or not math.isfinite(cheapest)]
        return replace(r, candidates=tuple(out))


def energy_aware(base: Policy, cost: ZeusCost, slack: float = 0.5) -> EnergyAware:
    """``base`` with energy-aware type choice; it keeps ``base``'s traits (preemptive,
    round-based, ...). Refused for policies that pack or size jobs (their rankings carry
    more than an order of flavors).

    Raises:
        SpecError: such a policy, or a negative ``slack``.
    """
    if not (math.isfinite(slack) and slack >= 0):
        raise SpecError(f"energy slack must be >= 0, got {slack}")
    if base.packs or base.elastic:
        raise SpecError(f"energy-aware type choice does not work with {base.display_name!r} "
                        "(it packs or sizes jobs)")
    cls = type(f"EnergyAware_{type(base).__name__}", (EnergyAware,), {
        "preemptive": base.preemptive, "round_based": base.round_based,
        "oracle": base.oracle})
    return cls(base, cost, slack)
