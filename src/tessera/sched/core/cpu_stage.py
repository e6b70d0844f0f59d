"""CPU-only jobs: placed by a stage of their own, after the GPU policy, away from NVLink domains.

A job with ``num_gpus`` 0 (``JobSpec.cpu_only``: data preprocessing, evaluation, a pipeline)
asks for CPUs and host memory only. GPU policies rank jobs by GPU throughput, GPU-seconds,
finish-time fairness ...; none of that means anything for a job with no GPUs, and several would
divide by its GPU count. So a round splits them off first (:func:`split_cpu_only`): the GPU
stages see a snapshot without them, in which the CPUs and memory that *running* CPU-only jobs
hold are booked (``Snapshot.host_held``), so no GPU gang is fed from them. After the GPU
decision, :func:`place_cpu_jobs` places the waiting CPU-only jobs, pure and deterministic:

1. **FIFO.** In submission order (snapshot order on a tie); a job that does not fit does not
   block a later, smaller one. A job that would take its queue over the queue's ``cpus`` or
   ``memory`` quota waits (reason: quota; :mod:`tessera.sched.core.host_quota`).
2. **What is left.** On one up node whose CPUs and memory, after every gang of this round
   (by the one rule, :func:`~tessera.model.host_need.gang_host_by_node`) and every running
   CPU-only job, still hold the job's total: no node is ever over-committed.
3. **Away from NVLink domains a waiting gang could take.** Among the nodes that hold it, in
   this order: a node in no NVLink domain; then a node of a domain that is already *broken*
   (some of its GPUs are taken, or a CPU-only job runs there); then the domain with the fewest
   free GPUs; then the node with the fewest free CPUs (best fit); then layout order. An intact
   domain is taken only when nothing else holds the job, and then the smallest one.

   Why it matters: a gang that holds all GPUs of a server also holds its GPU-proportional CPUs
   (all of them); one CPU-only job that takes a few cores on a server leaves that server, and
   so its whole domain, unable to host a domain-sized gang. The reported case -- one CPU job
   spread over 9 of 12 NVLink domains while 29 gangs waited -- is
   ``tests/scenarios/test_topology_domains.py``.
4. **Never preempted by a GPU policy.** A running CPU-only job keeps its node; GPU policies
   never see it. Only another queue's GPU job within its nominal quota that its CPUs or memory
   keep waiting can stop it (:mod:`tessera.sched.core.cpu_yield`).

A CPU-only job's placement holds no GPUs: ``gpus_by_node`` names its node with 0 GPUs (the
node's flavor is the placement's, for display only) and ``host_by_node`` the CPUs and memory it
holds. It progresses at ``JobSpec.cpu_steps_per_s`` wherever it runs. A job left waiting gets
a :class:`~tessera.sched.core.host_reasons.CpuShort` reason naming CPUs or memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from tessera.model.host_need import EPS, gang_host_by_node
from tessera.model.jobs import JobId, JobSpec
from tessera.model.nodes import Node
from tessera.sched.core.free_book import FreeCounts
from tessera.sched.core.host_quota import HostQuotaBook
from tessera.sched.core.host_reasons import CpuShort, HostShort
from tessera.sched.core.reasons import PendingKind, PendingReason
from tessera.sched.core.snapshot import JobView, Placement, Snapshot

__all__ = ["CpuRound", "cpu_infeasibility", "place_cpu_jobs", "split_cpu_only"]


class CpuRound(NamedTuple):
    """A round's outcome with the CPU-only jobs added (fields as ``Decision``'s)."""

    placements: Mapping[JobId, Placement]
    started: tuple[JobId, ...]
    pending: Mapping[JobId, PendingReason]


def split_cpu_only(snapshot: Snapshot) -> tuple[Snapshot, tuple[JobView, ...]]:
    """``(the snapshot the GPU stages see, the CPU-only jobs)``.

    Without CPU-only jobs, ``snapshot`` itself and ``()`` (a simulator that knows no job asks
    for host resources skips the walk). Otherwise the snapshot without them, whose
    ``host_held`` books what the running ones hold."""
    free = snapshot.free_gpus
    if isinstance(free, FreeCounts) and free.gpus_only:
        return snapshot, ()  # (no job asks for CPUs, so none is CPU-only)
    cpu = tuple(j for j in snapshot.jobs if j.spec.num_gpus == 0)
    if not cpu:
        return snapshot, ()
    gpu_jobs = tuple(j for j in snapshot.jobs if j.spec.num_gpus != 0)
    held = tuple(h for j in cpu if j.running and j.placement is not None
                 for h in _held(j.spec, j.placement, {}))
    return replace(snapshot.with_jobs(gpu_jobs), host_held=snapshot.host_held + held), cpu


def _held(spec: JobSpec | None, p: Placement, nodes: Mapping[str, Node]
          ) -> tuple[tuple[str, float, float], ...]:
    """What a placement holds: its own amounts (every CPU-only placement has them), else the
    job's demand or the proportional share on ``nodes``."""
    if p.host_by_node:
        return p.host_by_node
    return gang_host_by_node(p.gpus_by_node, spec.host if spec is not None else None, nodes)


class _Free:
    """Free CPUs, memory and GPUs per up node after a round's gangs, and the NVLink domains'
    state (see the module docstring, rule 3)."""

    def __init__(self, snapshot: Snapshot, placements: Mapping[JobId, Placement],
                 cpu_jobs: Sequence[JobView]) -> None:
        self.nodes = {n.node_id: n for n in snapshot.up_nodes()}
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.cpus = {n: float(node.cpu_cores) for n, node in self.nodes.items()}
        self.mem_gib = {n: float(node.mem_gib) for n, node in self.nodes.items()}
        self.gpus = {n: node.gpus for n, node in self.nodes.items()}
        self.domain = {n: node.nvlink_domain for n, node in self.nodes.items()}
        self.broken: set[str] = set()
        specs = {j.spec.job_id: j.spec for j in snapshot.jobs}
        for jid, p in placements.items():
            self.take(_held(specs.get(jid), p, self.nodes), p.gpus_by_node)
        for j in cpu_jobs:
            if j.running and j.placement is not None:
                self.take(_held(j.spec, j.placement, self.nodes), ())
                self.broken.update(d for n, _c, _m in j.placement.host_by_node
                                   if (d := self.domain.get(n)) is not None)
        self.domain_free: dict[str, int] = {}
        for n, d in self.domain.items():
            if d is not None:
                self.domain_free[d] = self.domain_free.get(d, 0) + max(self.gpus[n], 0)
                if self.gpus[n] < self.nodes[n].gpus:
                    self.broken.add(d)

    def take(self, held: tuple[tuple[str, float, float], ...],
             gpus_by_node: tuple[tuple[str, int], ...]) -> None:
        for n, c, m in held:
            if n in self.cpus:
                self.cpus[n] -= c
                self.mem_gib[n] -= m
        for n, k in gpus_by_node:
            if n in self.gpus:
                self.gpus[n] -= k

    def best_node(self, cpus: float, mem_gib: float) -> str | None:
        """The node rule 3 prefers among those whose free CPUs and memory hold the job."""
        best: tuple[tuple[bool, bool, int, float, int], str] | None = None
        for n in self.nodes:
            if self.cpus[n] + EPS < cpus or self.mem_gib[n] + EPS < mem_gib:
                continue
            d = self.domain[n]
            key = ((d is not None), d is not None and d not in self.broken,
                   self.domain_free[d] if d is not None else 0, self.cpus[n], self.order[n])
            if best is None or key < best[0]:
                best = (key, n)
        return None if best is None else best[1]


def place_cpu_jobs(
    snapshot: Snapshot,
    cpu_jobs: Sequence[JobView],
    placements: Mapping[JobId, Placement],
    started: tuple[JobId, ...],
    pending: Mapping[JobId, PendingReason],
) -> CpuRound:
    """The round's outcome (``placements``, ``started``, ``pending`` of the GPU stages, over
    the snapshot without CPU-only jobs) with ``cpu_jobs`` placed by the module's rules.

    ``snapshot`` is the round's whole snapshot (its nodes and every job's spec)."""
    free = _Free(snapshot, placements, cpu_jobs)
    out = dict(placements)
    new: list[JobId] = []
    waits = dict(pending)
    waiting = sorted((j for j in cpu_jobs if not j.running),
                     key=lambda j: j.spec.submit_time_s)  # (stable: snapshot order on a tie)
    for j in cpu_jobs:
        if j.running and j.placement is not None:
            out[j.spec.job_id] = j.placement
    book = HostQuotaBook(snapshot.queue_quotas(), cpu_jobs,  # (queues' cpus/memory quotas)
                         snapshot.host_draining)
    for j in waiting:
        if (over := book.held(j.spec)) is not None:
            waits[j.spec.job_id] = PendingReason(PendingKind.QUOTA, over)
            continue
        cpus, mem = j.spec.host.total(0) if j.spec.host is not None else (0.0, 0.0)
        n = free.best_node(cpus, mem)
        if n is None:
            waits[j.spec.job_id] = PendingReason(PendingKind.CAPACITY, CpuShort(
                cpus, mem, max(free.cpus.values(), default=0.0),
                max(free.mem_gib.values(), default=0.0)))
            continue
        held = ((n, cpus, mem),)
        p = Placement((free.nodes[n].flavor,), ((n, 0),), host_by_node=held)
        free.take(held, ())
        if (d := free.domain[n]) is not None:
            free.broken.add(d)
        out[j.spec.job_id] = p
        new.append(j.spec.job_id)
        book.charge(j.spec)
    return CpuRound(out, started + tuple(new), _name_holders(waits, cpu_jobs, out))


def _name_holders(waits: dict[JobId, PendingReason], cpu_jobs: Sequence[JobView],
                  out: Mapping[JobId, Placement]) -> dict[JobId, PendingReason]:
    """``waits`` with every GPU job's host shortage naming what CPU-only jobs hold after the
    round, per queue (:attr:`~tessera.sched.core.host_reasons.HostShort.cpu_only`)."""
    by_queue: dict[str, tuple[float, float]] = {}
    for j in cpu_jobs:
        p = out.get(j.spec.job_id)
        for _n, c, m in p.host_by_node if p is not None else ():
            c0, m0 = by_queue.get(j.spec.queue, (0.0, 0.0))
            by_queue[j.spec.queue] = (c0 + c, m0 + m)
    if not by_queue:
        return waits
    held = tuple((q, c, m) for q, (c, m) in sorted(by_queue.items()))
    named = dict(waits)
    for jid, r in waits.items():
        d = r.detail
        if isinstance(d, HostShort):  # (built directly: a long queue waits on host alike)
            named[jid] = PendingReason(r.kind, HostShort(
                d.needs_gpus, d.gpus_per_node, d.needs_cpus, d.needs_mem_gib, d.free_cpus,
                d.free_mem_gib, held))
    return named


def cpu_infeasibility(job: JobSpec, nodes: Sequence[Node]) -> str | None:
    """Why CPU-only ``job`` can never run on ``nodes`` (no server has its CPUs or memory even
    empty), or ``None``; checked at submission."""
    cpus, mem = job.host.total(0) if job.host is not None else (0.0, 0.0)
    if not nodes:
        return "the cluster has no nodes"
    most_cpus = max(n.cpu_cores for n in nodes)
    if cpus > most_cpus + EPS:
        return (f"CPU-only job needs {cpus:g} CPUs on one node; the largest server has "
                f"{most_cpus} CPUs")
    most_mem = max(n.mem_gib for n in nodes)
    if mem > most_mem + EPS:
        return (f"CPU-only job needs {mem:g} GiB of host memory on one node; the largest "
                f"server has {most_mem:g} GiB")
    if not any(n.cpu_cores + EPS >= cpus and n.mem_gib + EPS >= mem for n in nodes):
        return (f"CPU-only job needs {cpus:g} CPUs and {mem:g} GiB on one node; no server has "
                "both")
    return None
