"""``hetero_pack``'s way from the base ranking to the slot programme and back: which jobs the
core's count selection runs (:func:`replay_selection`), who takes which slot of the plan
(:func:`fill_slots`), and the ranking that results (:func:`ranked_candidates`). See
:mod:`tessera.sched.policies.hetero_pack` for the policy itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.policy import Ranking
from tessera.sched.core.snapshot import JobView, Snapshot
from tessera.sched.packing.slots import PairOption, SlotPlan


@dataclass(frozen=True, slots=True)
class Member:
    """A job in the slot programme: its group's key parts the mapping back to jobs needs."""

    job_id: JobId
    now_on: GpuFlavor | None
    partner_now: JobId | None


@dataclass(frozen=True, slots=True)
class PairWay:
    """How one pair option is worth its value: which side hosts, and each side's share."""

    first_hosts: bool
    first_share: float
    second_share: float


def replay_selection(base: Ranking, by_id: dict[JobId, JobView], snap: Snapshot
            ) -> tuple[dict[JobId, GpuFlavor], list[JobId]]:
    """The core's selection by count, replayed: ``({job: flavor it gets alone}, [jobs left
    waiting, in the ranking's order])``."""
    count: dict[GpuFlavor, int] = {}
    for node in snap.up_nodes():
        count[node.flavor] = count.get(node.flavor, 0) + node.gpus
    hosts: dict[JobId, GpuFlavor] = {}
    waiting: list[JobId] = []
    seen: set[JobId] = set()
    for jid, fl in base.candidates:
        if jid in hosts:
            continue
        g = by_id[jid].spec.num_gpus
        if count.get(fl, 0) >= g:
            count[fl] -= g
            hosts[jid] = fl
        elif jid not in seen:
            waiting.append(jid)
        seen.add(jid)
    return hosts, [j for j in dict.fromkeys(waiting) if j not in hosts]


def ranked_candidates(base: Ranking, where: Mapping[JobId, GpuFlavor],
                      partner_of: Mapping[JobId, JobId]) -> tuple[tuple[JobId, GpuFlavor], ...]:
    """The base ranking's jobs in its order, each planned job's flavor first and its other
    flavors after it (a gang the plan's flavor cannot hold -- the programme counts GPUs, not
    servers -- still finds its place before lower-ranked jobs take it); partners left out."""
    flavors: dict[JobId, list[GpuFlavor]] = {}
    for jid, fl in base.candidates:
        if jid not in partner_of:
            flavors.setdefault(jid, []).append(fl)
    out: list[tuple[JobId, GpuFlavor]] = []
    for jid, listed in flavors.items():
        first = where.get(jid)
        if first is not None:
            out.append((jid, first))
        out += [(jid, fl) for fl in dict.fromkeys(listed) if fl != first]
    return tuple(out)


def moves(now_on: GpuFlavor | None, flavor: GpuFlavor) -> bool:
    """Whether a slot on ``flavor`` restarts a job running on ``now_on`` (``None``: waiting,
    nothing to restart)."""
    return now_on is not None and now_on != flavor


def fill_slots(
    groups: list[list[Member]], solos: list[dict[GpuFlavor, float]], options: list[PairOption],
    ways: list[PairWay], plan: SlotPlan,
) -> tuple[dict[JobId, GpuFlavor], dict[JobId, JobId]]:
    """The plan's counts handed to jobs: ``({job: flavor} of every job alone or hosting,
    {partner: host})``.

    The programme counts slots per group; which member takes which slot is free, and each
    choice that moves a running job costs a restart the programme did not see. So the plan
    first keeps what runs: two jobs sharing a gang now keep sharing it where the plan has a
    pair of their groups on that flavor, and a job alone on a flavor keeps it where the plan
    has a solo slot of its group there. The slots left go best first (largest share of the
    value) to the highest-ranked members left.
    """
    group_of = {m.job_id: g for g, members in enumerate(groups) for m in members}
    by_id = {m.job_id: m for members in groups for m in members}
    solo_left = dict(plan.solo)
    pairs_left = dict(plan.pairs)
    where: dict[JobId, GpuFlavor] = {}
    partner_of: dict[JobId, JobId] = {}
    done: set[JobId] = set()

    def pair_up(o: int, first: Member, second: Member) -> None:
        host, partner = (first, second) if ways[o].first_hosts else (second, first)
        where[host.job_id] = options[o].flavor
        partner_of[partner.job_id] = host.job_id
        done.update((first.job_id, second.job_id))
        pairs_left[o] -= 1

    for o in sorted(pairs_left):  # pairs that share a gang now, kept
        opt = options[o]
        for m in groups[opt.first]:
            mate = by_id.get(m.partner_now) if m.partner_now is not None else None
            if (pairs_left[o] and mate is not None and m.now_on == opt.flavor
                    and mate.now_on == opt.flavor and group_of[mate.job_id] == opt.second
                    and not done.intersection((m.job_id, mate.job_id))):
                pair_up(o, m, mate)
    for members in groups:  # jobs alone on a flavor, kept there
        for m in members:
            g = group_of[m.job_id]
            if m.job_id not in done and m.now_on is not None and solo_left.get((g, m.now_on)):
                solo_left[(g, m.now_on)] -= 1
                where[m.job_id] = m.now_on
                done.add(m.job_id)
    slots: list[list[tuple[float, int, GpuFlavor, int, bool]]] = [[] for _ in groups]
    for (g, f), k in solo_left.items():
        slots[g] += [(-solos[g][f], len(slots[g]), f, -1, True)] * k
    for o, k in sorted(pairs_left.items()):
        opt, way = options[o], ways[o]
        slots[opt.first] += [(-way.first_share, len(slots[opt.first]), opt.flavor, o, True)] * k
        slots[opt.second] += [(-way.second_share, len(slots[opt.second]), opt.flavor, o,
                               False)] * k
    sides: dict[tuple[int, bool], list[Member]] = {}
    for g, members in enumerate(groups):
        left = [m for m in members if m.job_id not in done]
        for m, (_share, _i, f, o, first) in zip(left, sorted(slots[g]), strict=False):
            if o < 0:
                where[m.job_id] = f
            else:
                sides.setdefault((o, first), []).append(m)
    for o in sorted(pairs_left):
        for a, b in zip(sides.get((o, True), []), sides.get((o, False), []), strict=True):
            pair_up(o, a, b)
    return where, partner_of
