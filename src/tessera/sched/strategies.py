"""How gangs are placed once a policy has ranked them: the two placement strategies.

:func:`tessera.sched.core.decide` runs the round; this module holds the placement half of it:

* :func:`place_rounds` -- round-based (Gavel-style time sharing): every job is reconsidered;
* :func:`place_events` -- event-driven: running gangs stay put, lower-ranked ones are stopped
  only to make room for a higher-ranked job (:func:`_make_room`);
* :func:`backfill` -- lower-ranked jobs fill what fragmented gangs left, and, with mixed gangs
  on, a job no flavor can hold may start on several flavors (:func:`_try_mixed`);
* :func:`upgrade` -- a running gang moves to a faster free flavor when the move pays.

All of them work on one :class:`~tessera.sched.placement.FreeGpus` scratch copy and never
touch the snapshot.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.sched.oracle import ThroughputOracle
from tessera.sched.placement import FreeGpus
from tessera.sched.snapshot import JobView, Placement


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
            node can never sit on one, so it never waits for locality.
        max_preemption_attempts: in event-driven rounds, how many waiting jobs (highest
            ranked first) may try to make room by preemption; bounds a round's cost under
            heavy load, as Kueue bounds the heads it considers per cycle.
        mixed_gangs: a job that no single flavor can hold right now may start on GPUs of
            several of its flavors (Sia/Cannikin style), at the speed the planner predicts
            (:mod:`tessera.sched.mixed`). Never for jobs that need locality.
        mixed_min_speed: a mixed gang is accepted only if its predicted speed is at least
            this fraction of the job's speed on its best flavor (a job too big for any one
            flavor's whole capacity takes any mix).
        fill_only: keep every running gang where it is and only place waiting jobs into free
            GPUs, in the policy's order (a round-based policy's step between two rounds).
    """

    locality_wait_s: float = 0.0
    max_preemption_attempts: int = 64
    migration_cost_s: float = 60.0
    upgrade_min_gain: float = 0.2
    largest_node_gpus: int | None = None
    mixed_gangs: bool = False
    mixed_min_speed: float = 0.5
    fill_only: bool = False


def needs_locality(j: JobView, now_s: float, opts: PlacementOptions) -> bool:
    if j.spec.requires_locality:
        return True
    g = j.spec.num_gpus
    if opts.largest_node_gpus is not None and g > opts.largest_node_gpus:
        return False
    return g > 1 and now_s - j.pending_since_s < opts.locality_wait_s


def place_rounds(
    candidates: tuple[tuple[JobId, str], ...],
    by_id: dict[JobId, JobView],
    admitted: list[JobView],
    free: FreeGpus,
    oracle: ThroughputOracle,
    preemptive: bool,
    now_s: float,
    opts: PlacementOptions,
) -> dict[JobId, Placement]:
    """Round-based placement (Gavel-style time sharing): every job is reconsidered.

    (a) non-preemptive policies keep running gangs; (b) walk the ranking, selecting jobs while
    each flavor has GPUs left (by count); (c) selected running jobs keep their GPUs; (d) the
    rest are placed largest gang first; (e) what fragmented gangs could not use is backfilled.
    """
    for j in admitted:  # the free counts exclude running gangs: give their GPUs back
        if j.running and j.placement is not None:
            free.release(j.placement)
    run: dict[JobId, Placement] = {}
    if not preemptive:
        for j in admitted:
            if j.running and j.placement is not None and free.can_take(j.placement):
                free.take(j.placement)
                run[j.job_id] = j.placement
    count = {f: free.total_free(f) for f in free.flavors()}
    largest = {f: free.info(f).largest_block for f in free.flavors()}
    selected: dict[JobId, str] = {}
    left = sum(count.values())
    for jid, fl in candidates:
        if left <= 0:
            break
        if jid in selected or jid in run:
            continue
        cand = by_id.get(jid)
        if cand is None:
            continue
        g = cand.spec.num_gpus
        local = needs_locality(cand, now_s, opts)
        if g <= count.get(fl, 0) and (not local or g <= largest.get(fl, 0)):
            selected[jid] = fl
            count[fl] -= g
            left -= g
    for jid, fl in selected.items():
        p = by_id[jid].placement
        if by_id[jid].running and p is not None and p.flavor == fl and free.can_take(p):
            free.take(p)
            run[jid] = p
    rest = sorted((jid for jid in selected if jid not in run),
                  key=lambda jid: -by_id[jid].spec.num_gpus)
    for jid in rest:
        j = by_id[jid]
        placed = free.find(selected[jid], j.spec.num_gpus, needs_locality(j, now_s, opts))
        if placed is not None:
            free.take(placed)
            run[jid] = placed
    if len(run) < len(by_id):
        backfill(candidates, by_id, run, free, oracle, now_s, opts)
    return run


def place_events(
    candidates: tuple[tuple[JobId, str], ...],
    by_id: dict[JobId, JobView],
    admitted: list[JobView],
    free: FreeGpus,
    oracle: ThroughputOracle,
    preemptive: bool,
    now_s: float,
    opts: PlacementOptions,
) -> dict[JobId, Placement]:
    """Event-driven placement: running gangs stay put unless a higher-ranked job needs room.

    (a) every running gang keeps its GPUs; (b) waiting jobs are placed in rank order on the
    first of their flavors with room; (c) a preemptive policy then makes room for each waiting
    job it could not place by stopping lower-ranked running gangs on one of its flavors, the
    lowest-ranked first, and lets any victim that turned out not to be needed keep running;
    (d) whatever is still free is backfilled. (Moves to faster free flavors are a separate
    step, :func:`upgrade`.)
    """
    run: dict[JobId, Placement] = {}
    for j in admitted:
        if j.state is JobState.RUNNING and j.placement is not None:
            run[j.spec.job_id] = j.placement
    if len(run) == len(by_id):
        return run
    backfill(candidates, by_id, run, free, oracle, now_s, opts)
    if not preemptive or len(run) == len(by_id):
        return run
    rank: dict[JobId, int] = {}
    for jid, _fl in candidates:
        rank.setdefault(jid, len(rank))
    order = sorted((jid for jid in by_id if jid not in run and jid in rank), key=rank.__getitem__)
    flavors_of: dict[JobId, list[str]] = {}
    for jid, fl in candidates:
        flavors_of.setdefault(jid, []).append(fl)
    # Running gangs per flavor, lowest-ranked first: the victims of job j are a prefix.
    lowest_first: dict[str, list[JobId]] = {}
    for v in sorted((v for v in run if by_id[v].running), key=lambda v: -rank.get(v, 1 << 30)):
        for fl, _n in run[v].flavor_counts():
            lowest_first.setdefault(fl, []).append(v)
    for jid in order[:opts.max_preemption_attempts]:
        j = by_id[jid]
        for fl in flavors_of[jid]:
            victims: list[JobId] = []
            room = free.total_free(fl)
            for v in lowest_first.get(fl, ()):
                if rank.get(v, 1 << 30) <= rank[jid]:
                    break
                if v in run:
                    victims.append(v)
                    room += run[v].gpus_of(fl)
            if room < j.spec.num_gpus:
                continue
            placed, released = _make_room(j, fl, victims, run, free, now_s, opts)
            if placed is None:
                continue
            free.take(placed)
            for v in released:
                if free.can_take(run[v]):
                    free.take(run[v])  # not needed after all: keeps running
                else:
                    del run[v]
            run[jid] = placed
            break
    backfill(candidates, by_id, run, free, oracle, now_s, opts)
    return run


def upgrade(
    jobs: list[JobView],
    moves: dict[JobId, Placement],
    free: FreeGpus,
    oracle: ThroughputOracle,
    now_s: float,
    opts: PlacementOptions,
) -> None:
    """Move running gangs to faster free GPUs when the move pays for itself.

    Only when nobody waits (waiting jobs come first). A job moves if, after paying
    ``opts.migration_cost_s``, it finishes at least ``opts.upgrade_min_gain`` sooner than
    staying. The policy's own view of speed is used, so an agnostic policy never upgrades.
    Biggest gains first. Without this, a job preempted during a burst and resumed on a slow
    flavor would stay there after the burst, while fast GPUs idle.
    """
    options: list[tuple[float, JobView, str, Placement]] = []
    for j in jobs:
        p = j.placement
        if j.state is not JobState.RUNNING or p is None:
            continue
        if j.spec.job_id in moves:
            continue
        target = (_mixed_upgrade(j.spec, p, oracle) if p.is_mixed
                  else oracle.faster_than(j.spec, p.flavor, p.consolidated))
        if target is None:
            continue
        best_flavor, best_rate, cur_rate = target
        if free.total_free(best_flavor) + p.gpus_of(best_flavor) < j.spec.num_gpus:
            continue
        left = j.remaining_at(now_s)
        stay_s = left / cur_rate
        move_s = opts.migration_cost_s + left / best_rate
        if move_s < stay_s * (1.0 - opts.upgrade_min_gain):
            options.append((stay_s - move_s, j, best_flavor, p))
    for _gain, j, fl, old in sorted(options, key=lambda o: -o[0]):
        if old.is_mixed:  # its own GPUs of the target flavor may be part of the new gang
            free.release(old)
            placed = free.find(fl, j.spec.num_gpus, needs_locality(j, now_s, opts))
            free.take(placed if placed is not None else old)
            if placed is not None:
                moves[j.spec.job_id] = placed
            continue
        placed = free.find(fl, j.spec.num_gpus, needs_locality(j, now_s, opts))
        if placed is not None and (placed.consolidated or not old.consolidated):
            free.take(placed)
            free.release(old)
            moves[j.spec.job_id] = placed


def _mixed_upgrade(job: JobSpec, p: Placement, oracle: ThroughputOracle
                   ) -> tuple[str, float, float] | None:
    """``(best flavor, its rate, the mixed gang's rate)`` if one flavor alone would be faster."""
    rates = oracle.rates(job)
    if not rates:
        return None
    best = max(rates, key=lambda r: r.consolidated)
    cur = oracle.placement_rate(job, p)
    return (best.flavor, best.consolidated, cur) if best.consolidated > cur > 0 else None


def _make_room(
    j: JobView, fl: str, victims: list[JobId], run: dict[JobId, Placement], free: FreeGpus,
    now_s: float, opts: PlacementOptions,
) -> tuple[Placement | None, list[JobId]]:
    """Free room for ``j`` on ``fl`` by stopping as little as possible.

    First, a single victim: the smallest gang whose GPUs are enough (lowest-ranked among
    equals), so a one-GPU job never stops a 64-GPU gang when a one-GPU job would do. Otherwise,
    victims lowest-ranked first until ``j`` fits. Everything is undone if it never fits.
    """
    local = needs_locality(j, now_s, opts)
    need = j.spec.num_gpus - free.total_free(fl)
    position = {v: i for i, v in enumerate(victims)}  # 0 = lowest-ranked
    singles = sorted((v for v in victims if run[v].gpus_of(fl) >= need),
                     key=lambda v: (run[v].num_gpus, position[v]))
    for v in singles:
        free.release(run[v])
        placed = free.find(fl, j.spec.num_gpus, local)
        if placed is not None:
            return placed, [v]
        free.take(run[v])
    released: list[JobId] = []
    for v in victims:
        free.release(run[v])
        released.append(v)
        placed = free.find(fl, j.spec.num_gpus, local)
        if placed is not None:
            return placed, released
    for v in released:
        free.take(run[v])
    return None, []


def backfill(
    candidates: tuple[tuple[JobId, str], ...],
    by_id: dict[JobId, JobView],
    run: dict[JobId, Placement],
    free: FreeGpus,
    oracle: ThroughputOracle,
    now_s: float,
    opts: PlacementOptions,
    releases: Releases | None = None,
) -> None:
    """Place lower-ranked jobs into GPUs that fragmented gangs could not use.

    With ``opts.mixed_gangs``, a job none of whose flavors has room gets a mixed gang at its
    last candidate, i.e. at its turn in the ranking (:func:`_try_mixed`).
    """
    flavors = free.flavors()
    last: dict[JobId, int] = {}
    releases = releases or Releases(by_id.values(), now_s)  # lazy: costs nothing unused
    skipped = False  # a higher-ranked job was left waiting: no mixed gang may pass it
    if opts.mixed_gangs:
        last = {jid: i for i, (jid, _fl) in enumerate(candidates)}
    for i, (jid, fl) in enumerate(candidates):
        if jid in run:
            continue
        if all(free.total_free(f) == 0 for f in flavors):
            break
        j = by_id.get(jid)
        if j is None:
            continue
        if free.total_free(fl) >= j.spec.num_gpus:
            p = j.placement
            if j.running and p is not None and p.flavor == fl and free.can_take(p):
                placed: Placement | None = p
            else:
                placed = free.find(fl, j.spec.num_gpus, needs_locality(j, now_s, opts))
            if placed is not None:
                free.take(placed)
                run[jid] = placed
                continue
        if last.get(jid) == i:
            mixed = None if skipped else _try_mixed(j, free, oracle, now_s, opts, releases)
            if mixed is not None:
                free.take(mixed)
                run[jid] = mixed
            else:
                skipped = True
    if opts.mixed_gangs and not skipped:
        # A job bigger than every flavor may be left out of the ranking by a policy that only
        # ranks what one flavor can hold: it gets its mix last, in submission order.
        for jid, j in by_id.items():
            if jid not in run and jid not in last and not j.running:
                mixed = _try_mixed(j, free, oracle, now_s, opts, releases)
                if mixed is None:
                    break
                free.take(mixed)
                run[jid] = mixed


class Releases:
    """When running gangs are expected to finish, per flavor: ``[(end_s, gpus), ...]`` sorted,
    built on first use in a round (mixed-gang decisions compare starting now with waiting)."""

    def __init__(self, jobs: Iterable[JobView], now_s: float) -> None:
        self._jobs = jobs
        self._now = now_s
        self._by_flavor: dict[str, list[tuple[float, int]]] | None = None

    def wait_s(self, flavor: str, free_now: int, gpus: int) -> float:
        """Seconds until ``gpus`` GPUs of ``flavor`` are expected free (inf if never)."""
        if self._by_flavor is None:
            by: dict[str, list[tuple[float, int]]] = {}
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


def _try_mixed(j: JobView, free: FreeGpus, oracle: ThroughputOracle, now_s: float,
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
    placed = free.find_mixed(order, g)
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
