"""How gangs are placed once a policy has ranked them: the two placement strategies.

:func:`tessera.sched.core.decide.decide` runs the round; this module holds the placement half of it:

* :func:`place_rounds` -- round-based (Gavel-style time sharing): every job is reconsidered;
* :func:`place_events` -- event-driven: running gangs stay put, lower-ranked ones are stopped
  only to make room for a higher-ranked job (:func:`_make_room`);
* :func:`backfill` -- lower-ranked jobs fill what fragmented gangs left, and, with mixed gangs
  on, a job no flavor can hold may start on several flavors
  (:func:`~tessera.sched.mixed.placement.try_mixed`);
* :func:`upgrade` -- a running gang moves to a faster free flavor when the move pays.

All of them work on one :class:`~tessera.sched.core.placement.FreeGpus` scratch copy and never
touch the snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.options import PlacementOptions, needs_locality
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.snapshot import JobView, Placement
from tessera.sched.mixed.placement import Releases, mixed_upgrade, try_mixed

__all__ = ["PlacementOptions", "Releases", "backfill", "needs_locality", "place_events",
           "place_rounds", "upgrade"]


def place_rounds(
    candidates: tuple[tuple[JobId, GpuFlavor], ...],
    by_id: dict[JobId, JobView],
    admitted: Sequence[JobView],
    free: FreeGpus,
    oracle: ThroughputOracle,
    preemptive: bool,
    now_s: float,
    opts: PlacementOptions,
    leased: frozenset[JobId] = frozenset(),
) -> dict[JobId, Placement]:
    """Round-based placement (Gavel-style time sharing): every job is reconsidered.

    (a) non-preemptive policies keep running gangs, and every policy keeps the ``leased`` ones
    (their run has not yet progressed as long as a swap costs,
    :func:`tessera.sched.core.cadence.leased`); (b) walk the ranking, selecting jobs while
    each flavor has GPUs left (by count); (c) selected running jobs keep their GPUs; (d) the
    rest are placed largest gang first; (e) what fragmented gangs could not use is backfilled.
    """
    running = JobState.RUNNING
    held = [j for j in admitted if j.state is running and j.placement is not None]
    # the free counts exclude running gangs: give their GPUs back
    free.release_each([j.placement for j in held if j.placement is not None])
    run: dict[JobId, Placement] = {}
    if not preemptive or leased:
        for j in held:
            if (not preemptive or j.job_id in leased) and j.placement is not None \
                    and free.take_if_free(j.placement):
                run[j.job_id] = j.placement
    count = {f: free.total_free(f) for f in free.flavors()}
    largest = {f: free.info(f).largest_block for f in free.flavors()}
    selected: dict[JobId, GpuFlavor] = {}
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
        if g <= count.get(fl, 0) and (g <= largest.get(fl, 0)
                                      or not needs_locality(cand, now_s, opts)):
            selected[jid] = fl
            count[fl] -= g
            left -= g
    staying: list[tuple[JobId, Placement]] = []
    for jid, fl in selected.items():
        j = by_id[jid]
        p = j.placement
        if (p is not None and j.state is running and p.sole_flavor == fl
                and p.num_gpus == j.spec.num_gpus):
            staying.append((jid, p))
    # (each was given back above and nothing was taken since, unless kept in (a))
    for (jid, p), taken in zip(staying, free.take_back([p for _jid, p in staying]),
                               strict=True):
        if taken:
            run[jid] = p
    rest = sorted((jid for jid in selected if jid not in run),
                  key=lambda jid: -by_id[jid].spec.num_gpus)
    for jid in rest:
        j = by_id[jid]
        placed = free.find(selected[jid], j.spec.num_gpus, needs_locality(j, now_s, opts),
                           j.spec.host)
        if placed is not None:
            free.take(placed)
            run[jid] = placed
    if len(run) < len(by_id):
        backfill(candidates, by_id, run, free, oracle, now_s, opts)
    return run


def place_events(
    candidates: tuple[tuple[JobId, GpuFlavor], ...],
    by_id: dict[JobId, JobView],
    admitted: Sequence[JobView],
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
    flavors_of: dict[JobId, list[GpuFlavor]] = {}
    for jid, fl in candidates:
        flavors_of.setdefault(jid, []).append(fl)
    # Running gangs per flavor, lowest-ranked first: the victims of job j are a prefix.
    lowest_first: dict[GpuFlavor, list[JobId]] = {}
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
    jobs: Sequence[JobView],
    moves: dict[JobId, Placement],
    free: FreeGpus,
    oracle: ThroughputOracle,
    now_s: float,
    opts: PlacementOptions,
    stay_put: dict[JobId, Placement] | None = None,
) -> None:
    """Move running gangs to faster free GPUs when the move pays for itself.

    Only when nobody waits (waiting jobs come first). A job moves if, after paying
    ``opts.migration_cost_s``, it finishes at least ``opts.upgrade_min_gain`` sooner than
    staying. The policy's own view of speed is used, so an agnostic policy never upgrades.
    Biggest gains first. Without this, a job preempted during a burst and resumed on a slow
    flavor would stay there after the burst, while fast GPUs idle.

    ``stay_put`` (the context's :class:`~tessera.sched.core.context.StayPut` memory) names gangs
    this run can never move; they are skipped, and gangs found so are added to it.
    """
    never: dict[JobId, Placement] = {} if stay_put is None else stay_put
    options: list[tuple[float, JobView, GpuFlavor, Placement]] = []
    # One C-speed pass drops the waiting jobs (no placement, never remembered) and the
    # remembered gangs; this runs at every event, over every running job.
    for j in [j for j in jobs if never.get(j.spec.job_id) is not j.placement]:
        p = j.placement
        jid = j.spec.job_id
        if p is None or j.state is not JobState.RUNNING or jid in moves:
            continue
        target = (mixed_upgrade(j.spec, p, oracle) if p.is_mixed
                  else oracle.faster_than(j.spec, p.flavor, p.consolidated))
        if target is None:
            never[jid] = p
            continue
        best_flavor, best_rate, cur_rate = target
        if free.total_free(best_flavor) + p.gpus_of(best_flavor) < j.spec.num_gpus:
            continue
        left = j.remaining_at(now_s)
        stay_s = left / cur_rate
        move_s = opts.migration_cost_s + left / best_rate
        if move_s < stay_s * (1.0 - opts.upgrade_min_gain):
            options.append((stay_s - move_s, j, best_flavor, p))
        else:
            never[jid] = p
    for _gain, j, fl, old in sorted(options, key=lambda o: -o[0]):
        if old.is_mixed:  # its own GPUs of the target flavor may be part of the new gang
            free.release(old)
            placed = free.find(fl, j.spec.num_gpus, needs_locality(j, now_s, opts),
                           j.spec.host)
            free.take(placed if placed is not None else old)
            if placed is not None:
                moves[j.spec.job_id] = placed
            continue
        placed = free.find(fl, j.spec.num_gpus, needs_locality(j, now_s, opts),
                           j.spec.host)
        if placed is not None and (placed.consolidated or not old.consolidated):
            free.take(placed)
            free.release(old)
            moves[j.spec.job_id] = placed


def _make_room(
    j: JobView, fl: GpuFlavor, victims: list[JobId], run: dict[JobId, Placement], free: FreeGpus,
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
        placed = free.find(fl, j.spec.num_gpus, local, j.spec.host)
        if placed is not None:
            return placed, [v]
        free.take(run[v])
    released: list[JobId] = []
    for v in victims:
        free.release(run[v])
        released.append(v)
        placed = free.find(fl, j.spec.num_gpus, local, j.spec.host)
        if placed is not None:
            return placed, released
    for v in released:
        free.take(run[v])
    return None, []


def backfill(
    candidates: tuple[tuple[JobId, GpuFlavor], ...],
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
    last candidate, i.e. at its turn in the ranking
    (:func:`~tessera.sched.mixed.placement.try_mixed`).
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
        if not any(map(free.total_free, flavors)):  # (no flavor has a free GPU left)
            break
        j = by_id.get(jid)
        if j is None:
            continue
        if free.total_free(fl) >= j.spec.num_gpus:
            p = j.placement
            if (j.running and p is not None and p.sole_flavor == fl
                    and p.num_gpus == j.spec.num_gpus and free.can_take(p)):
                placed: Placement | None = p
            else:
                placed = free.find(fl, j.spec.num_gpus, needs_locality(j, now_s, opts),
                           j.spec.host)
            if placed is not None:
                free.take(placed)
                run[jid] = placed
                continue
        if last.get(jid) == i:
            mixed = None if skipped else try_mixed(j, free, oracle, now_s, opts, releases)
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
                mixed = try_mixed(j, free, oracle, now_s, opts, releases)
                if mixed is None:
                    break
                free.take(mixed)
                run[jid] = mixed
