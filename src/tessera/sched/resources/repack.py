"""Synergy's round as a twin setting: every gang's GPUs, CPUs and memory dealt again from nothing.

Synergy's simulator (github.com/msr-fiddle/synergy, ``simulator/``; read, not copied) runs in
300 s rounds. At a round's end every running job's lease ends (``JobLeaseEndEvent`` frees its
GPUs, CPUs and memory, before the ``ScheduleEvent`` of the same instant), and the scheduler
(``schedulers/fifo_synergy_new.py``) deals the whole cluster again: the runnable jobs sorted
by arrival, each job's speedup reset, and each, while GPUs are free, allocated by the mode's
rule (``resources/cluster.py``):

* ``proportional`` (its ``fair=True``): the GPU-proportional share, placed like a demand;
* ``greedy`` (``fair=False, tune=False``): its demand vector on the server with the fewest
  free GPUs that holds it whole, else (a gang) one GPU at a time from the servers with the
  fewest free GPUs where a GPU's share of the demand fits; else the job is *skipped* this
  round -- a job that ran in the last round may be skipped too, and an older one served first;
* ``tune``: as ``greedy``, else its fair share placed the same way, else the jobs already dealt
  on the server with the fewest free GPUs are reset to their fair share until it fits there.

A job keeps only its progress between rounds: no server, no CPUs. Nothing is charged for
landing elsewhere. With ``repack=round`` (``-p fifo:resources=tune:repack=round``) a decision
does exactly this: the core's GPU placements are dropped, and every running gang and every
job waiting for GPUs is dealt again, oldest first (:func:`repack_round`). A running gang that
lands on the same GPUs keeps running (its CPUs may change: it is re-timed in place); one that
lands elsewhere moves; one that is skipped is preempted. Run it as Synergy does with
``--mode rounds --round-s 300 --checkpoint-s 0 --restore-s 0`` (``docs/scheduler.md``): rounds
of 300 s and moves that cost nothing. Tessera's default (no ``repack``) keeps a running gang's
GPUs, as a real cluster must, and pays for every move.

What is not modelled: Synergy credits a round's progress when the round starts and ends a job
at the end of the round in which it finishes (item 10 of ``docs/scheduler.md``); the simulator
here credits progress continuously.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import replace
from typing import Literal, NamedTuple, Protocol, get_args

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec
from tessera.model.resources import proportional_share
from tessera.sched.core.reasons import CannotRun, PendingKind, PendingReason
from tessera.sched.core.snapshot import Placement, Snapshot
from tessera.sched.resources.speed import node_sizes
from tessera.sched.resources.tune import Host, _amounts, _fits, _reset_peers, _round

Repack = Literal["none", "round"]
REPACKS: tuple[str, ...] = get_args(Repack)
#: The jobs a round deals again besides the running ones: those waiting for GPUs.
_WAITING_FOR_GPUS = (PendingKind.CAPACITY, PendingKind.FRAGMENTATION)
_EPS = 1e-9
Sizes = Mapping[str, tuple[int, float, float]]
#: What a gang asks for: its demand, Synergy's fair share, or the GPU-proportional share.
Want = Literal["demand", "fair", "proportional"]



class Decided(Protocol):
    """What a re-deal reads of the core's decision (a :class:`~tessera.sched.core.decide.
    Decision`; named by its fields, as the core imports this package)."""

    @property
    def placements(self) -> Mapping[JobId, Placement]: ...
    @property
    def preempted(self) -> tuple[JobId, ...]: ...
    @property
    def pending(self) -> Mapping[JobId, PendingReason]: ...


class Repacked(NamedTuple):
    """A round after the re-deal: the fields of a ``Decision`` it replaces."""

    placements: dict[JobId, Placement]
    started: tuple[JobId, ...]
    preempted: tuple[JobId, ...]
    pending: dict[JobId, PendingReason]


def check_repack(value: object) -> Repack:
    """``value`` as a :data:`Repack`.

    Raises:
        SpecError: anything else, naming the choices.
    """
    if value not in REPACKS:
        raise SpecError(f"repack={value!r}: choose one of {', '.join(REPACKS)}")
    return value  # type: ignore[return-value]


def repack_round(snapshot: Snapshot, decided: Decided, mode: str) -> Repacked:
    """Deal every running gang and every job waiting for GPUs again, from an empty cluster,
    oldest first, by ``mode``'s rule (module docstring). The core's placements say only which
    jobs it would run; jobs pending for another reason (quota, carbon, no fit) stay pending.

    Returns the round's new ``placements``, ``started`` (the new gangs and the running ones
    that land on other GPUs), ``preempted`` (the running gangs skipped) and ``pending``."""
    placements_in, preempted_in, pending_in = (decided.placements, decided.preempted,
                                               decided.pending)
    sizes = node_sizes(snapshot.cluster)
    running = {j.spec.job_id: j for j in snapshot.split().running}
    wanted = (set(placements_in) | set(running) | set(preempted_in)
              | {jid for jid, r in pending_in.items() if r.kind in _WAITING_FOR_GPUS})
    pending = {jid: r for jid, r in pending_in.items() if jid not in wanted}
    deal = _Deal(snapshot, sizes)
    for spec in _oldest_first(snapshot, wanted):
        why = deal.one(spec, mode)
        if why is not None:
            pending[spec.job_id] = PendingReason(PendingKind.CAPACITY, CannotRun(why))
    placements: dict[JobId, Placement] = {}
    started: list[JobId] = []
    for jid, q in deal.placed.items():
        q = replace(q, host_by_node=deal.given[jid])
        old = running.get(jid)
        old_p = None if old is None else old.placement
        if old_p is not None and q.same_gpus(old_p):
            placements[jid] = old_p if old_p.host_by_node == q.host_by_node else q
            continue
        placements[jid] = q
        started.append(jid)
    preempted = tuple(jid for jid in running if jid not in placements)
    return Repacked(placements, tuple(started), preempted, pending)


def _want(spec: JobSpec, p: Placement, sizes: Sizes, kind: Want) -> Host:
    """``((node, cpus, mem), ...)`` that ``spec`` asks on ``p``'s nodes: its ``demand`` (capped
    at a whole server), its ``fair`` share (Synergy's ``_make_fair_share``: the proportional
    share when the demand exceeds it, else the demand), or the ``proportional`` share."""
    if kind != "proportional":
        return _amounts(spec, p, sizes, fair=kind == "fair")
    out = []
    for node_id, g in p.gpus_by_node:
        ng, nc, nm = sizes[node_id]
        c, m = proportional_share(1, ng, nc, nm)
        out.append((node_id, c * g, m * g))
    return tuple(out)


def _oldest_first(snapshot: Snapshot, ids: set[JobId]) -> list[JobSpec]:
    """The jobs of ``ids`` by arrival (Synergy's FIFO order; snapshot order on ties)."""
    specs = [(j.spec.submit_time_s, k, j.spec) for k, j in enumerate(snapshot.jobs)
             if j.spec.job_id in ids]
    return [s for _t, _k, s in sorted(specs, key=lambda x: (x[0], x[1]))]


class _Deal:
    """One round's books: free GPUs, CPUs and memory per node, and what each job was given."""

    def __init__(self, snapshot: Snapshot, sizes: Sizes) -> None:
        self.sizes = sizes
        self.nodes = snapshot.up_nodes()
        self.free_gpus = {n.node_id: n.gpus for n in self.nodes}
        self.free = {n.node_id: [sizes[n.node_id][1], sizes[n.node_id][2]] for n in self.nodes}
        for node_id, cpus, mem in snapshot.host_held:  # running CPU-only jobs keep theirs
            if node_id in self.free:
                self.free[node_id][0] -= cpus
                self.free[node_id][1] -= mem
        self.placed: dict[JobId, Placement] = {}
        self.given: dict[JobId, Host] = {}
        self.on_node: dict[str, list[JobSpec]] = {}

    def one(self, spec: JobSpec, mode: str) -> str | None:
        """Deal ``spec`` by ``mode``; ``None`` when it got GPUs, else why it waits."""
        flavors = [f for f in dict.fromkeys(n.flavor for n in self.nodes)
                   if not spec.flavors or f in spec.flavors]
        if sum(self.free_gpus[n.node_id] for n in self.nodes
               if n.flavor in flavors) < spec.num_gpus:
            return f"needs {spec.num_gpus} GPUs; fewer are free in this round's re-pack"
        kind: Want = "proportional" if mode == "proportional" else "demand"
        p = self._place(spec, flavors, kind)
        if p is None and mode == "tune":
            kind = "fair"
            p = self._place(spec, flavors, kind)
            if p is None:  # Synergy's peer reset, on the node with the fewest free GPUs
                p = self._fewest_free(spec, flavors)
                if p is not None:
                    _reset_peers(_want(spec, p, self.sizes, kind), self.free, self.on_node,
                                 self.given, self.placed, self.sizes)
        if p is None:
            return (f"its CPUs and memory are free on no node with {spec.num_gpus} free GPUs "
                    f"in this round's re-pack (resources={mode}, repack=round)")
        host = _want(spec, p, self.sizes, kind)
        host = tuple((n, min(_round(c), self.free[n][0]), min(_round(m), self.free[n][1]))
                     for n, c, m in host)
        for n, c, m in host:
            self.free[n][0] -= c
            self.free[n][1] -= m
            self.on_node.setdefault(n, []).append(spec)
        for n, g in p.gpus_by_node:
            self.free_gpus[n] -= g
        self.placed[spec.job_id] = p
        self.given[spec.job_id] = host
        return None

    def _place(self, spec: JobSpec, flavors: list[GpuFlavor], kind: Want) -> Placement | None:
        """Synergy's ``allocate_synergy_placement``: the node with the fewest free GPUs
        (layout order on ties) that holds the whole gang and its ``kind`` of CPUs and memory;
        else one GPU at a time from the nodes with the fewest free GPUs where a GPU's share
        fits; ``None`` when neither finds room."""
        g = spec.num_gpus
        for flavor in flavors:
            whole = [(self.free_gpus[n.node_id], k, n.node_id) for k, n in enumerate(self.nodes)
                     if n.flavor == flavor and self.free_gpus[n.node_id] >= g]
            for _f, _k, node_id in sorted(whole):
                q = Placement.of(flavor, ((node_id, g),))
                if _fits(_want(spec, q, self.sizes, kind), self.free):
                    return q
        if g == 1:
            return None
        for flavor in flavors:
            spread = self._spread(spec, flavor, kind)
            if spread is not None:
                return spread
        return None

    def _spread(self, spec: JobSpec, flavor: GpuFlavor, kind: Want) -> Placement | None:
        """One GPU at a time from the node with the fewest free GPUs where one GPU's share of
        the demand still fits (counting what this gang already took there)."""
        held = {n: [0.0, 0.0] for n in self.free}
        took: dict[str, int] = {}
        heap = [(self.free_gpus[n.node_id], k, n.node_id) for k, n in enumerate(self.nodes)
                if n.flavor == flavor and self.free_gpus[n.node_id] > 0]
        heapq.heapify(heap)
        while sum(took.values()) < spec.num_gpus and heap:
            left, k, node_id = heapq.heappop(heap)
            one = _want(spec, Placement.of(flavor, ((node_id, 1),)), self.sizes, kind)
            (_n, c, m), = one
            f = self.free[node_id]
            if f[0] - held[node_id][0] + _EPS < c or f[1] - held[node_id][1] + _EPS < m:
                continue
            held[node_id][0] += c
            held[node_id][1] += m
            took[node_id] = took.get(node_id, 0) + 1
            if left > 1:
                heapq.heappush(heap, (left - 1, k, node_id))
        if sum(took.values()) < spec.num_gpus:
            return None
        by_node = tuple(sorted(took.items(), key=lambda x: (-x[1], x[0])))
        return Placement.of(flavor, by_node)

    def _fewest_free(self, spec: JobSpec, flavors: list[GpuFlavor]) -> Placement | None:
        """The gang on the node with the fewest free GPUs that holds it whole, CPUs aside
        (Synergy's ``_get_underutilized_servers``); ``None`` when no node does."""
        g = spec.num_gpus
        best = min(((self.free_gpus[n.node_id], k, n) for k, n in enumerate(self.nodes)
                    if n.flavor in flavors and self.free_gpus[n.node_id] >= g),
                   default=None, key=lambda x: (x[0], x[1]))
        return None if best is None else Placement.of(best[2].flavor, ((best[2].node_id, g),))
