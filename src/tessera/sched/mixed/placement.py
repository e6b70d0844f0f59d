"""Mixed gangs in placement: when the core starts a job on GPUs of several flavors.

The planner predicts a mixed gang's speed (:mod:`tessera.sched.mixed.rates`); this module decides
when the decision core takes one. A mix is tried for a job only at its turn in the ranking,
only when no single flavor has room, and kept only when it is fast enough and finishes the job
no later than waiting for one flavor would (:func:`try_mixed`). A running mix moves to a single
flavor when that is faster (:func:`mixed_upgrade`). A 3-D job left waiting because the mix it
would take fits no plan is told the planner's reason (:func:`mixed_no_plan`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec
from tessera.sched.core.options import PlacementOptions, needs_locality
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.snapshot import JobView, Placement


def mixed_upgrade(job: JobSpec, p: Placement, oracle: ThroughputOracle
                   ) -> tuple[GpuFlavor, float, float] | None:
    """``(best flavor, its rate, the mixed gang's rate)`` if one flavor alone would be faster."""
    rates = oracle.rates(job)
    if not rates:
        return None
    best = max(rates, key=lambda r: r.consolidated)
    cur = oracle.placement_rate(job, p)
    return (best.flavor, best.consolidated, cur) if best.consolidated > cur > 0 else None


class Releases:
    """When running gangs are expected to finish, per flavor: ``[(end_s, gpus), ...]`` sorted,
    built on first use in a round (mixed-gang decisions compare starting now with waiting)."""

    def __init__(self, jobs: Iterable[JobView], now_s: float) -> None:
        self._jobs = jobs
        self._now = now_s
        self._by_flavor: dict[GpuFlavor, list[tuple[float, int]]] | None = None

    def wait_s(self, flavor: GpuFlavor, free_now: int, gpus: int) -> float:
        """Seconds until ``gpus`` GPUs of ``flavor`` are expected free (inf if never)."""
        if self._by_flavor is None:
            by: dict[GpuFlavor, list[tuple[float, int]]] = {}
            for j in self._jobs:
                p = j.placement
                if not j.running or p is None or j.progress_rate <= 0:
                    continue
                start = max(self._now, j.progress_from_s)
                end = start + j.remaining_at(self._now) / j.progress_rate
                for f, n in p.flavor_counts():
                    by.setdefault(f, []).append((end - self._now, n))
            for ends in by.values():
                ends.sort()
            self._by_flavor = by
        if free_now >= gpus:
            return 0.0
        have = free_now
        for after_s, n in self._by_flavor.get(flavor, ()):
            have += n
            if have >= gpus:
                return after_s
        return math.inf


def try_mixed(j: JobView, free: FreeGpus, oracle: ThroughputOracle, now_s: float,
               opts: PlacementOptions, releases: Releases) -> Placement | None:
    """A mixed gang for ``j`` over its flavors, fastest per GPU first, or ``None``.

    Only when no single flavor has enough free GPUs and the job may spread over servers. The
    gang is taken when the planner's predicted speed is at least ``opts.mixed_min_speed`` of
    the job's best flavor's *and* starting now on the mix is expected to finish it no later
    than waiting for any one flavor (the wait estimated from the running gangs' expected
    finishes, ignoring jobs queued ahead, which only makes waiting look better than it is).
    A job too big for every flavor's whole capacity takes any mix. A running mixed gang whose
    GPUs are still free keeps them.
    """
    g = j.spec.num_gpus
    if g < 2 or needs_locality(j, now_s, opts):
        return None
    p = j.placement
    if j.running and p is not None and p.is_mixed and free.can_take(p):
        return p
    rates = oracle.rates(j.spec)
    if len(rates) < 2 or any(free.total_free(r.flavor) >= g for r in rates):
        return None
    order = [r.flavor for r in sorted(rates, key=lambda r: -r.spread)]
    placed = free.find_mixed(order, g, j.spec.host)
    if placed is None or not placed.is_mixed:
        return None
    speed = oracle.placement_rate(j.spec, placed)
    if speed <= 0:
        return None
    if not any(free.capacity(r.flavor) >= g for r in rates):
        return placed
    if speed < opts.mixed_min_speed * oracle.best_rate(j.spec):
        return None
    left = j.remaining_at(now_s)
    start_cost = opts.migration_cost_s if j.attained_gpu_s > 0 else 0.0
    mixed_done_s = start_cost + left / speed
    for r in rates:
        if free.capacity(r.flavor) >= g:
            wait = releases.wait_s(r.flavor, free.total_free(r.flavor), g)
            if wait + start_cost + left / r.consolidated < mixed_done_s:
                return None
    return placed


def mixed_no_plan(j: JobView, free: FreeGpus, oracle: ThroughputOracle, now_s: float,
                  opts: PlacementOptions) -> str | None:
    """Why the mixed gang :func:`try_mixed` would form for a waiting 3-D job fits no plan.

    ``None`` unless mixed gangs are allowed, the job asks for a 3-D plan, may spread, no
    single flavor has its gang free but its flavors together do, and the planner finds no
    plan for the gang they form (say a model too big for the free T4s and K80s, while it
    fits the busy A100s): then the job waits for one flavor's capacity, and the message says
    why the free mix is no use — the planner's own, with the gang's shape.
    """
    g = j.spec.num_gpus
    if (not opts.mixed_gangs or j.spec.parallelism is None or g < 2
            or needs_locality(j, now_s, opts)):
        return None
    rates = oracle.rates(j.spec)
    if len(rates) < 2 or any(free.total_free(r.flavor) >= g for r in rates):
        return None
    placed = free.find_mixed([r.flavor for r in sorted(rates, key=lambda r: -r.spread)], g,
                             j.spec.host)
    if placed is None or not placed.is_mixed:
        return None
    return oracle.plans.why_not(j.spec.parallelism, placed.parts())
