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
    Synergy-TUNE as Synergy's simulator runs it (:mod:`tessera.sched.resources.tune`): at
    every decision the CPUs and memory of *every* gang that runs after it -- running and new
    -- are dealt again, oldest first: its demand where free, else its fair share (the
    proportional share, or its demand when that is less) at speed 1.0, else the gangs already
    served on the node are reset to their fair share, most CPUs per GPU first, until it is
    free. Gangs whose share changed keep their GPUs and are re-timed
    (:mod:`tessera.sim.host_retune`).
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

Difference from Synergy, said plainly: Synergy re-deals every job's GPUs *and* CPUs at each
300 s round; here TUNE re-deals the CPUs and memory of every gang at each decision (event),
but a running gang keeps its GPUs. GREEDY and proportional never change a running gang.
Synergy's own round is a twin setting, ``resources=MODE:repack=round``
(:mod:`tessera.sched.resources.repack`): every gang's GPUs, CPUs and memory dealt again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Literal, get_args

from tessera.errors import SpecError
from tessera.model.jobs import JobId, JobSpec
from tessera.model.resources import proportional_share
from tessera.sched.core.host_free import HostFree
from tessera.sched.core.lp import LpSolver
from tessera.sched.core.reasons import CannotRun, PendingKind, PendingReason
from tessera.sched.core.snapshot import Placement, Snapshot
from tessera.sched.resources.opt import opt_hosts
from tessera.sched.resources.place import gpus_free_after, repick
from tessera.sched.resources.repack import repack_round as repack_round  # (for the core)
from tessera.sched.resources.speed import host_held, node_sizes
from tessera.sched.resources.tune import demand_per_gpu, fair_per_gpu, tune_round

HostMode = Literal["proportional", "greedy", "tune", "opt"]
HOST_MODES: tuple[str, ...] = get_args(HostMode)
#: One line per mode, for ``tessera policies``.
HOST_MODE_SUMMARIES: tuple[tuple[str, str], ...] = (
    ("proportional", "Synergy's fair: CPUs and memory in proportion to GPUs."),
    ("greedy", "Synergy-GREEDY: each gang's best-speed demand, or it waits."),
    ("tune", "Synergy-TUNE: every gang's CPUs dealt again at each decision, oldest first: "
             "demand where free, else the proportional share (peers reset to theirs)."),
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
    keep running hold (never below zero), booked in a :class:`~tessera.sched.core.host_free.
    HostFree` by the one rule the core and the drivers use. With a round's ``placements``, a
    running gang the round preempts holds nothing and one it starts anew (``new``) is left
    out. What running CPU-only jobs hold (``snapshot.host_held``) is never free."""
    book = HostFree(snapshot.cluster.nodes)
    book.shift(snapshot.host_held, -1)
    for j in snapshot.split().running:
        p = j.placement if placements is None else placements.get(j.spec.job_id)
        if p is None or j.spec.job_id in new:
            continue
        book.shift(host_held(j.spec, p, snapshot.cluster), -1)
    return {n: [max(book.cpus[n], 0.0), max(book.mem_gib[n], 0.0)] for n in book.nodes}


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
    """A job's demand per GPU (:func:`tessera.sched.resources.tune.demand_per_gpu`): Synergy's
    simulator demand for a job of its workload; else the least CPUs (then memory) at which its
    profile reaches its best speed; else its ``HostDemand``; else the node's proportional
    share."""
    return demand_per_gpu(spec, node_cpus_per_gpu, node_mem_per_gpu)


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
    running = {j.spec.job_id for j in snapshot.split().running}
    if mode == "tune":  # every gang's CPUs and memory dealt again, at every decision
        moved = tune_round(snapshot, placements, snapshot.cluster,
                           frozenset(started_in) - running, frozenset(running - set(started_in)))
        return placements, started_in + moved, pending
    if not started_in:
        return placements, started_in, pending
    sizes = node_sizes(snapshot.cluster)
    free = free_host(snapshot, placements, frozenset(started_in))
    wanted = set(started_in)
    by_id = {j.spec.job_id: j.spec for j in snapshot.jobs if j.spec.job_id in wanted}
    started: list[JobId] = []
    if mode == "opt":
        return _opt(snapshot, placements, started_in, free, by_id, solver), started_in, pending
    moving = running & wanted
    free_gpus = gpus_free_after(snapshot, placements) if mode == "greedy" else {}
    for jid in started_in:
        spec, p = by_id[jid], placements[jid]
        if mode == "greedy" and jid not in moving:  # on a node where its demand fits
            def fits(q: Placement, s: JobSpec = spec) -> bool:
                return not isinstance(_one(s, q, "greedy", free, sizes), str)
            q = repick(p, snapshot, free_gpus, fits)
            p = p if q is None else q
        host = _one(spec, p, mode, free, sizes)
        if isinstance(host, str) and jid in moving:  # a running gang the round moves
            host = _one(spec, p, "fair", free, sizes)  # cannot be left nowhere: its fair share
        if isinstance(host, str):
            for node_id, g in p.gpus_by_node:  # its GPUs stay free (GREEDY's fragmentation)
                free_gpus[node_id] = free_gpus.get(node_id, 0) + g
            del placements[jid]
            pending[jid] = PendingReason(PendingKind.CAPACITY, CannotRun(host))
            continue
        for node_id, cpus, mem in host:
            free[node_id][0] -= cpus
            free[node_id][1] -= mem
        placements[jid] = replace(p, host_by_node=host)
        started.append(jid)
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


def _one(spec: JobSpec, p: Placement, mode: HostMode | Literal["fair"],
         free: dict[str, list[float]], sizes: Mapping[str, tuple[int, float, float]],
         ) -> tuple[tuple[str, float, float], ...] | str:
    """One gang's ``host_by_node``, or why (GREEDY) it cannot start. ``fair``: Synergy's fair
    share (:func:`~tessera.sched.resources.tune.fair_per_gpu`), for a GREEDY gang the round
    moves and whose demand is not free where it lands."""
    out = []
    for node_id, g in p.gpus_by_node:
        ng, nc, nm = sizes[node_id]
        prop_c, prop_m = proportional_share(1, ng, nc, nm)
        fc, fm = free[node_id]
        if mode == "proportional":
            want_c, want_m = prop_c, prop_m
        elif mode == "fair":
            want_c, want_m = fair_per_gpu(spec, prop_c, prop_m)
        else:
            want_c, want_m = ideal_per_gpu(spec, prop_c, prop_m)
            # a demand over the whole server is capped at it (as Synergy caps it)
            want_c, want_m = min(want_c, nc / g), min(want_m, nm / g)
        if mode == "greedy" and (want_c * g > fc + _EPS or want_m * g > fm + _EPS):
            what = "CPUs" if want_c * g > fc + _EPS else "GiB of host memory"
            have = fc if what == "CPUs" else fm
            need = want_c * g if what == "CPUs" else want_m * g
            return (f"needs {need:g} {what} on {node_id} for its best speed "
                    f"(resources=greedy); {have:g} free")
        want_c, want_m = min(want_c * g, fc), min(want_m * g, fm)
        out.append((node_id, _round(want_c), _round(want_m)))
    return tuple(out)


def _round(x: float) -> float:
    """Drop float dust (3.0000000001 CPUs) so books add up exactly."""
    r = round(x, 6)
    return 0.0 if math.isclose(r, 0.0, abs_tol=1e-9) else r
