"""Synergy's CPU and memory allocations, run after any policy has placed the GPUs.

A base policy (FIFO, SRTF, LAS, finish-time fairness ...) ranks jobs and the core places their
GPUs; a *resource mode* (``-p fifo:resources=tune``) then decides how many CPUs and how much
host memory each newly started gang gets on each of its nodes, and writes it into
``Placement.host_by_node``. The modes are Synergy's (Mohan et al., OSDI'22):

``proportional``
    Synergy's "fair": every gang gets its GPUs' share of the node (8 GPUs, 24 CPUs, 500 GB:
    3 CPUs and 62.5 GB per GPU), whatever it would gain from more.
``greedy``
    Synergy-GREEDY: a gang gets its whole demand (the least CPUs and memory per GPU at which
    its profile reaches its best speed, or its own ``HostDemand``) or does not start this
    round -- the GPUs it was given stay free, which is GREEDY's fragmentation.
``tune``
    Synergy-TUNE: its demand where the node has it free; else the fastest point of its profile
    the node has free, never below its proportional share (or its demand, when that is less:
    a language model needing 1 CPU per GPU takes 1). When the node has less than that free,
    TUNE *takes back* what running gangs on it hold beyond their own proportional share
    (largest excess first) until the newcomer's share is free: those gangs keep their GPUs and
    slow down to what they still hold (the simulator re-times them,
    :mod:`tessera.sim.host_retune`), and get it back when CPUs free up again.
``opt``
    Synergy-OPT's LP relaxation (:mod:`tessera.sched.resources.opt`): the CPUs and memory of
    the newly started gangs *and of every running gang sharing a node with them* chosen again,
    together, to maximise their summed speed, rounded down to measured points (the LP's value
    is an upper bound the rounding cannot beat). Running gangs whose share changed keep their
    GPUs and are re-timed, as under TUNE.

Until the core books CPUs and memory itself (issue 33, part 1), these allocators are what keeps
a node from being over-committed: the free CPUs and memory of a node are its size minus what
every running gang holds (:func:`~tessera.sched.resources.speed.host_held`), and no mode ever
gives more than that.

Difference from Synergy's simulator, said plainly: Synergy re-allocates every job's CPUs at
each 300 s round from scratch; here TUNE changes running gangs only at decisions (events):
a newcomer takes back what it needs (down to the others' shares, never below), and at every
decision running gangs short of their demand get what their nodes have free again
(oldest first). GREEDY and proportional never change a running gang.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Literal, get_args

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId, JobSpec
from tessera.model.resources import proportional_share
from tessera.sched.core.lp import LpSolver
from tessera.sched.core.reasons import CannotRun, PendingKind, PendingReason
from tessera.sched.core.snapshot import Placement, Snapshot
from tessera.sched.resources.opt import opt_hosts
from tessera.sched.resources.speed import best_point_within, host_held, node_sizes

HostMode = Literal["proportional", "greedy", "tune", "opt"]
HOST_MODES: tuple[str, ...] = get_args(HostMode)
#: One line per mode, for ``tessera policies``.
HOST_MODE_SUMMARIES: tuple[tuple[str, str], ...] = (
    ("proportional", "Synergy's fair: CPUs and memory in proportion to GPUs."),
    ("greedy", "Synergy-GREEDY: each gang's best-speed demand, or it waits."),
    ("tune", "Synergy-TUNE: demand where free, else the best that fits, never below the "
             "proportional share (taken back from gangs holding more)."),
    ("opt", "Synergy-OPT: an LP over the gangs sharing the nodes (upper bound), rounded down."),
)
_EPS = 1e-9


def check_mode(mode: object) -> HostMode:
    """``mode`` as a :data:`HostMode`.

    Raises:
        SpecError: anything else, naming the modes.
    """
    if mode not in HOST_MODES:
        raise SpecError(f"resources={mode!r}: choose one of {', '.join(HOST_MODES)}")
    return mode  # type: ignore[return-value]


def free_host(snapshot: Snapshot, placements: Mapping[JobId, Placement] | None = None,
              new: frozenset[JobId] = frozenset()) -> dict[str, list[float]]:
    """``node_id -> [free cpus, free mem_gib]``: each node's size less what the gangs that
    keep running hold (never below zero). With a round's ``placements``, a running gang the
    round preempts holds nothing and one it starts anew (``new``) is left out."""
    sizes = node_sizes(snapshot.cluster)
    free = {n: [c, m] for n, (_g, c, m) in sizes.items()}
    for j in snapshot.split().running:
        p = j.placement if placements is None else placements.get(j.spec.job_id)
        if p is None or j.spec.job_id in new:
            continue
        for node_id, cpus, mem in host_held(j.spec, p, snapshot.cluster):
            f = free[node_id]
            f[0] = max(f[0] - cpus, 0.0)
            f[1] = max(f[1] - mem, 0.0)
    return free


def _kept_in_place(snapshot: Snapshot, placements: dict[JobId, Placement],
                   started: tuple[JobId, ...]) -> tuple[JobId, ...]:
    """``started`` less the running gangs the round re-placed on the very same GPUs (a full
    round builds new placement objects for kept gangs; their CPUs and memory stay theirs)."""
    running = {j.spec.job_id: j for j in snapshot.split().running}
    out = []
    for jid in started:
        j = running.get(jid)
        if j is not None and j.placement is not None and placements[jid].same_gpus(j.placement):
            placements[jid] = j.placement
            continue
        out.append(jid)
    return tuple(out)


def ideal_per_gpu(spec: JobSpec, node_cpus_per_gpu: float,
                  node_mem_per_gpu: float) -> tuple[float, float]:
    """A job's demand per GPU: the least CPUs (then memory) at which its profile reaches its
    best speed; else its ``HostDemand``; else the node's proportional share."""
    sens = spec.sensitivity
    if sens is not None:
        top = max(p.speedup for p in sens.points)
        best = min((p for p in sens.points if p.speedup >= top - _EPS),
                   key=lambda p: (p.cpus_per_gpu, p.mem_gib_per_gpu))
        return best.cpus_per_gpu, best.mem_gib_per_gpu
    if spec.host is not None:
        return spec.host.per_gpu_amounts(spec.num_gpus)
    return node_cpus_per_gpu, node_mem_per_gpu


Allocation = tuple[dict[JobId, Placement], tuple[JobId, ...], dict[JobId, PendingReason]]
"""A round's ``(placements, started, pending)`` after the CPUs and memory were chosen."""


def allocate_hosts(snapshot: Snapshot, placements_in: Mapping[JobId, Placement],
                   started_in: tuple[JobId, ...], pending_in: Mapping[JobId, PendingReason],
                   mode: HostMode, solver: LpSolver | None = None) -> Allocation:
    """A round's placements with CPUs and memory chosen by ``mode`` for every gang it starts.

    Gangs are served in the order the round started them (the policy's rank order); a GREEDY
    gang whose demand does not fit is taken out of the round and waits, with the node and the
    CPUs or memory it lacked as its reason.
    """
    placements = dict(placements_in)
    pending = dict(pending_in)
    started_in = _kept_in_place(snapshot, placements, started_in)
    if not started_in and mode != "tune":  # (TUNE gives freed CPUs back at every decision)
        return placements, started_in, pending
    sizes = node_sizes(snapshot.cluster)
    free = free_host(snapshot, placements, frozenset(started_in))
    wanted = set(started_in)
    by_id = {j.spec.job_id: j.spec for j in snapshot.jobs if j.spec.job_id in wanted}
    started: list[JobId] = []
    if mode == "opt":
        return _opt(snapshot, placements, started_in, free, by_id, solver), started_in, pending
    held = _held_by_node(snapshot, placements, wanted) if mode == "tune" else {}
    moving = {j.spec.job_id for j in snapshot.split().running} & wanted
    for jid in started_in:
        spec, p = by_id[jid], placements[jid]
        if mode == "tune":
            _take_back(spec, p, free, held, snapshot.cluster, placements)
        host = _one(spec, p, mode, free, sizes)
        if isinstance(host, str) and jid in moving:  # a running gang the round moves
            host = _one(spec, p, "tune", free, sizes)  # cannot be left nowhere: as TUNE
        if isinstance(host, str):
            del placements[jid]
            pending[jid] = PendingReason(PendingKind.CAPACITY, CannotRun(host))
            continue
        for node_id, cpus, mem in host:
            free[node_id][0] -= cpus
            free[node_id][1] -= mem
        placements[jid] = replace(p, host_by_node=host)
        started.append(jid)
    if mode == "tune":
        _top_up(snapshot, placements, free, wanted)
    return placements, tuple(started), pending


def _opt(snapshot: Snapshot, placements: dict[JobId, Placement], started: tuple[JobId, ...],
         free: dict[str, list[float]], by_id: Mapping[JobId, JobSpec],
         solver: LpSolver | None) -> dict[JobId, Placement]:
    """OPT: one LP over the started gangs and every running gang sharing a node with them
    (their CPUs and memory are chosen again, so the LP is Synergy's whole-node optimum)."""
    touched = {n for jid in started for n, _g in placements[jid].gpus_by_node}
    moved = set(started)
    again = [j for j in snapshot.split().running if j.placement is not None
             and j.spec.job_id in placements and j.spec.job_id not in moved
             and any(n in touched for n, _g in j.placement.gpus_by_node)]
    specs = dict(by_id)
    for j in again:  # their holdings go back into the pool the LP shares out
        assert j.placement is not None
        specs[j.spec.job_id] = j.spec
        for node_id, cpus, mem in host_held(j.spec, j.placement, snapshot.cluster):
            free[node_id][0] += cpus
            free[node_id][1] += mem
    ids = [j.spec.job_id for j in again] + list(started)
    chosen = opt_hosts([(specs[i], placements[i]) for i in ids], free, node_sizes(
        snapshot.cluster), solver)
    for i in ids:
        placements[i] = replace(placements[i], host_by_node=chosen[i])
    return placements


def _top_up(snapshot: Snapshot, placements: dict[JobId, Placement],
            free: dict[str, list[float]], fresh: set[JobId]) -> None:
    """TUNE's give-back: running gangs (oldest first) that hold less than their demand get
    the best point the free CPUs and memory of their nodes now allow -- what Synergy's
    next round would give them."""
    sizes = node_sizes(snapshot.cluster)
    for j in snapshot.split().running:
        cur = placements.get(j.spec.job_id)
        if cur is None or j.spec.sensitivity is None or j.spec.job_id in fresh:
            continue
        held = host_held(j.spec, cur, snapshot.cluster)
        new = []
        for (node_id, c, m), (_n, g) in zip(held, cur.gpus_by_node, strict=True):
            ng, nc, nm = sizes[node_id]
            want_c, want_m = ideal_per_gpu(j.spec, *proportional_share(1, ng, nc, nm))
            want_c, want_m = min(want_c, nc / g), min(want_m, nm / g)
            f = free[node_id]
            if c >= want_c * g - _EPS and m >= want_m * g - _EPS:
                new.append((node_id, c, m))
                continue
            pt = best_point_within(j.spec.sensitivity, min(want_c, (c + f[0]) / g),
                                   min(want_m, (m + f[1]) / g))
            if pt is None or pt.speedup <= j.spec.sensitivity.speedup_at(c / g, m / g):
                new.append((node_id, c, m))
                continue
            nc_, nm_ = max(pt.cpus_per_gpu * g, c), max(pt.mem_gib_per_gpu * g, m)
            f[0] -= nc_ - c
            f[1] -= nm_ - m
            new.append((node_id, _round(nc_), _round(nm_)))
        if tuple(new) != held:
            placements[j.spec.job_id] = replace(cur, host_by_node=tuple(new))


def _floor_per_gpu(spec: JobSpec, prop_c: float, prop_m: float) -> tuple[float, float]:
    """What TUNE never goes below: the proportional share, or the demand when that is less."""
    want_c, want_m = ideal_per_gpu(spec, prop_c, prop_m)
    return min(want_c, prop_c), min(want_m, prop_m)


def _held_by_node(snapshot: Snapshot, placements: Mapping[JobId, Placement],
                  new: set[JobId]) -> dict[str, list[tuple[JobSpec, Placement]]]:
    """The gangs that keep running on each node (TUNE's candidates to take back from)."""
    out: dict[str, list[tuple[JobSpec, Placement]]] = {}
    for j in snapshot.split().running:
        p = placements.get(j.spec.job_id)
        if p is not None and j.spec.job_id not in new:
            for node_id, _g in p.gpus_by_node:
                out.setdefault(node_id, []).append((j.spec, p))
    return out


def _take_back(spec: JobSpec, p: Placement, free: dict[str, list[float]],
               held: dict[str, list[tuple[JobSpec, Placement]]], cluster: ClusterSpec,
               placements: dict[JobId, Placement]) -> None:
    """Cut running gangs on ``p``'s nodes back towards their floor until ``spec``'s floor is
    free there (TUNE); the cut placements replace theirs in ``placements``."""
    sizes = node_sizes(cluster)
    for node_id, g in p.gpus_by_node:
        ng, nc, nm = sizes[node_id]
        prop_c, prop_m = proportional_share(1, ng, nc, nm)
        need_c, need_m = (x * g for x in _floor_per_gpu(spec, prop_c, prop_m))
        f = free[node_id]
        if f[0] >= need_c - _EPS and f[1] >= need_m - _EPS:
            continue
        others = held.get(node_id, [])
        excess = []
        for k, (o_spec, o_p) in enumerate(others):
            cur = placements.get(o_spec.job_id, o_p)
            og = dict(cur.gpus_by_node)[node_id]
            fc, fm = (x * og for x in _floor_per_gpu(o_spec, prop_c, prop_m))
            hold = {n: (c, m) for n, c, m in host_held(o_spec, cur, cluster)}
            hc, hm = hold[node_id]
            if hc > fc + _EPS or hm > fm + _EPS:
                excess.append((hc - fc, k, o_spec, cur, hc, hm, fc, fm))
        for _x, _k, o_spec, cur, hc, hm, fc, fm in sorted(excess, key=lambda e: (-e[0], e[1])):
            if f[0] >= need_c - _EPS and f[1] >= need_m - _EPS:
                break
            give_c = min(max(hc - fc, 0.0), max(need_c - f[0], 0.0))
            give_m = min(max(hm - fm, 0.0), max(need_m - f[1], 0.0))
            f[0] += give_c
            f[1] += give_m
            new = tuple((n, _round(c - give_c), _round(m - give_m)) if n == node_id
                        else (n, c, m)
                        for n, c, m in host_held(o_spec, cur, cluster))
            placements[o_spec.job_id] = replace(cur, host_by_node=new)


def _one(spec: JobSpec, p: Placement, mode: HostMode, free: dict[str, list[float]],
         sizes: Mapping[str, tuple[int, float, float]],
         ) -> tuple[tuple[str, float, float], ...] | str:
    """One gang's ``host_by_node``, or why (GREEDY) it cannot start."""
    out = []
    for node_id, g in p.gpus_by_node:
        ng, nc, nm = sizes[node_id]
        prop_c, prop_m = proportional_share(1, ng, nc, nm)
        fc, fm = free[node_id]
        if mode == "proportional":
            want_c, want_m = prop_c, prop_m
        else:
            want_c, want_m = ideal_per_gpu(spec, prop_c, prop_m)
            # a demand over the whole server is capped at it (as Synergy caps it)
            want_c, want_m = min(want_c, nc / g), min(want_m, nm / g)
        if mode == "greedy":
            if want_c * g > fc + _EPS or want_m * g > fm + _EPS:
                what = "CPUs" if want_c * g > fc + _EPS else "GiB of host memory"
                have = fc if what == "CPUs" else fm
                need = want_c * g if what == "CPUs" else want_m * g
                return (f"needs {need:g} {what} on {node_id} for its best speed "
                        f"(resources=greedy); {have:g} free")
        elif mode == "tune" and (want_c * g > fc + _EPS or want_m * g > fm + _EPS):
            floor_c, floor_m = _floor_per_gpu(spec, prop_c, prop_m)
            want_c, want_m = _tuned(spec, max(fc / g, floor_c), max(fm / g, floor_m),
                                    floor_c, floor_m)
        want_c, want_m = min(want_c * g, fc), min(want_m * g, fm)
        out.append((node_id, _round(want_c), _round(want_m)))
    return tuple(out)


def _tuned(spec: JobSpec, cap_c: float, cap_m: float, floor_c: float,
           floor_m: float) -> tuple[float, float]:
    """TUNE's fallback per GPU: the fastest profile point within ``cap``, at least the floor."""
    if spec.sensitivity is None:
        return min(cap_c, max(floor_c, 0.0)), min(cap_m, max(floor_m, 0.0))
    pt = best_point_within(spec.sensitivity, cap_c, cap_m)
    if pt is None or pt.speedup < spec.sensitivity.speedup_at(floor_c, floor_m):
        return floor_c, floor_m
    return pt.cpus_per_gpu, max(pt.mem_gib_per_gpu, floor_m)


def _round(x: float) -> float:
    """Drop float dust (3.0000000001 CPUs) so books add up exactly."""
    r = round(x, 6)
    return 0.0 if math.isclose(r, 0.0, abs_tol=1e-9) else r
