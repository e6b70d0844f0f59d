"""Placement knobs of one decision round, and the locality rule they imply."""

from __future__ import annotations

from dataclasses import dataclass

from tessera.sched.core.power_options import PowerBudget, ZeusCost
from tessera.sched.core.snapshot import JobView


@dataclass(frozen=True, slots=True)
class PlacementOptions:
    """Placement knobs.

    Attributes:
        locality_wait_s: a multi-GPU gang waits this long for a single-node placement before it
            accepts being split across nodes (Philly's relaxed-locality guideline). 0 splits at
            once when needed; ``inf`` never splits. Jobs with ``requires_locality`` never split.
        migration_cost_s: what moving a running gang costs (checkpoint + restore); the
            simulator sets it from its own costs.
        upgrade_min_gain: an event-driven preemptive policy moves a running gang to a faster
            free flavor when that finishes it at least this fraction sooner, cost included.
        largest_node_gpus: filled in by ``decide`` from the cluster: a gang larger than every
            node (and every NVLink domain, when the cluster has them) can never sit on one,
            so it never waits for locality.
        max_preemption_attempts: in event-driven rounds, how many waiting jobs (highest
            ranked first) may try to make room by preemption; bounds a round's cost under
            heavy load, as Kueue bounds the heads it considers per cycle.
        mixed_gangs: a job that no single flavor can hold right now may start on GPUs of
            several of its flavors (Sia/Cannikin style), at the speed the planner predicts
            (:mod:`tessera.sched.mixed.rates`). Never for jobs that need locality.
        mixed_min_speed: a mixed gang is accepted only if its predicted speed is at least
            this fraction of the job's speed on its best flavor (a job too big for any one
            flavor's whole capacity takes any mix).
        fill_only: keep every running gang where it is and only place waiting jobs into free
            GPUs, in the policy's order (a round-based policy's step between two rounds).
        power_budget: keep the cluster under this power budget after the policy decides
            (:mod:`tessera.sched.core.power_budget`); ``None``: no budget, no change.
        zeus: set every running job's power limit to Zeus's cost-minimising one on its
            flavor (:func:`~tessera.sched.core.energy_choice.zeus_limits`); ``None``: none.
    """

    locality_wait_s: float = 0.0
    max_preemption_attempts: int = 64
    migration_cost_s: float = 60.0
    upgrade_min_gain: float = 0.2
    largest_node_gpus: int | None = None
    mixed_gangs: bool = False
    mixed_min_speed: float = 0.5
    fill_only: bool = False
    power_budget: PowerBudget | None = None
    zeus: ZeusCost | None = None


def needs_locality(j: JobView, now_s: float, opts: PlacementOptions) -> bool:
    """Whether ``j`` must sit on one node now: it requires locality, or it is a multi-GPU gang
    still inside its locality wait (a gang larger than every node never waits)."""
    if j.spec.requires_locality:
        return True
    g = j.spec.num_gpus
    if opts.largest_node_gpus is not None and g > opts.largest_node_gpus:
        return False
    return g > 1 and now_s - j.pending_since_s < opts.locality_wait_s
