"""CPU-only jobs give way to another queue's in-quota GPU job whose CPUs or memory they hold.

CPU-only jobs (:mod:`tessera.sched.core.cpu_stage`) are placed after the GPU policy, outside
every queue's GPU quota, and no GPU policy ever preempts them. Without this stage one queue's
CPU-only jobs could take every server's CPUs and hold another queue's GPU job -- well within
its nominal quota -- pending for as long as they run. A CPU-only job is the cheapest thing to
stop (it holds no GPU and restarts in seconds), so the default is:

    When a GPU job whose queue is within its **nominal** GPU quota waits because no node has
    the CPUs or memory its GPUs need, and stopping running CPU-only jobs of **other** queues on
    one node would make room, the fewest of them -- newest first -- are preempted, and the
    GPU job is placed in the same round.

The rules, exact:

1. **Who may ask.** A waiting GPU job (``num_gpus`` > 0) of a queue with a quota, such that the
   GPUs its queue holds after the round plus its own stay within the queue's nominal GPUs
   (with per-flavor quotas: within the nominal of the node's flavor). A queue over its nominal
   (borrowing) asks for nothing; a job of a queue without a quota asks for nothing. Candidates
   are asked in submission order (snapshot order on a tie); one GPU job per round.
2. **Where.** A single up node of a flavor the job accepts with enough free GPUs for the whole
   gang after the round, whose free CPUs and memory do not hold the gang's share now
   (:func:`~tessera.model.host_need.gang_host_by_node`), but would once some running CPU-only
   jobs *of other queues* on that node stop. A job that already fits somewhere by host waits
   for another reason and asks for nothing; a CPU-only job of its own queue never gives way.
3. **Who gives way.** On each such node, the fewest of its other-queue CPU-only jobs whose
   stop makes room; among sets of that size, the newest (jobs ordered by latest
   ``progress_from_s``, then latest submission, sets compared in that order). The node needing
   the fewest wins (layout order on a tie). A queue with a ``cpus:`` or ``memory:`` quota
   (:mod:`~tessera.sched.core.host_quota`) has its CPU-only jobs *guaranteed*: the CPU stage
   starts none beyond that quota, and none of them gives way (as in Kueue, a queue within its
   nominal quota is not reclaimed from); only queues without one run CPU-only jobs best-effort.
   A CPU-only job whose run has made progress for less than :data:`YIELD_EXEMPT_S` does not
   give way either (Slurm's ``PreemptExemptTime``): without it a tenant could restart another
   queue's job over and over -- submit an in-quota GPU job, let it take the CPUs, cancel it,
   again -- and "newest first" would pick the job just restarted each time. The GPU job then
   waits for the exemption to run out.
4. **Only if it helps.** The caller runs the GPU stages again with the chosen jobs' CPUs and
   memory free; the yield stands only if the GPU job is then placed, else nothing is preempted.

The preempted jobs carry a note starting with
:data:`~tessera.sched.core.quota_round.QUOTA_PREEMPTION` naming the GPU job and its queue (the
live service's stop reason and event) and wait again as CPU-only jobs. Pure and deterministic,
like the rest of the decision core: the simulator and the live service run the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import combinations
from typing import NamedTuple, Protocol, TypeVar

from tessera.model.host_need import EPS, gang_host_by_node
from tessera.model.jobs import JobId, JobSpec
from tessera.model.nodes import Node
from tessera.sched.core.quota_round import QUOTA_PREEMPTION
from tessera.sched.core.quotas import QueueQuota
from tessera.sched.core.reasons import PendingKind, PendingReason
from tessera.sched.core.snapshot import JobView, Placement, Snapshot

__all__ = ["YIELD_EXEMPT_S", "HostYield", "find_yield", "give_way", "yield_note"]

YIELD_EXEMPT_S = 300.0
"""Seconds a CPU-only job's run must have made progress before it may give way (rule 3): one
restart per 5 minutes at most, however often a tenant asks."""


class HostYield:
    """A chosen yield: ``victims`` (running CPU-only jobs, newest first) stop so that GPU job
    ``for_job`` of queue ``queue`` fits on ``node``."""

    __slots__ = ("for_job", "node", "queue", "victims")

    def __init__(self, for_job: JobId, queue: str, node: str, victims: tuple[JobId, ...]
                 ) -> None:
        self.for_job = for_job
        self.queue = queue
        self.node = node
        self.victims = victims

    def gpu_view(self, gpu_view: Snapshot, cpu_jobs: Sequence[JobView]) -> Snapshot:
        """``gpu_view`` (the GPU stages' snapshot, :func:`~tessera.sched.core.cpu_stage.
        split_cpu_only`) with the victims' CPUs and memory no longer held."""
        gone = _held_by(cpu_jobs, set(self.victims))
        held = list(gpu_view.host_held)
        for h in gone:
            held.remove(h)
        return replace(gpu_view, host_held=tuple(held))

    def notes(self) -> dict[JobId, str]:
        return {v: yield_note(self.for_job, self.queue) for v in self.victims}


def yield_note(for_job: JobId, queue: str) -> str:
    """The preempted CPU-only job's note (the live service's stop reason and event)."""
    return (f"{QUOTA_PREEMPTION}: CPU-only job gives its CPUs and memory to GPU job {for_job} "
            f"(queue {queue!r}, within its nominal quota)")


class Outcome(Protocol):
    """What a GPU decision must show for a yield (``Decision`` has it)."""

    @property
    def placements(self) -> Mapping[JobId, Placement]: ...

    @property
    def pending(self) -> Mapping[JobId, PendingReason]: ...


D = TypeVar("D", bound=Outcome)

#: Up to this many other-queue CPU-only jobs on a node, the fewest to stop is found exactly.
EXACT_UP_TO = 10

#: GPU jobs tried per round: each try runs the GPU stages once more.
MAX_TRIES = 3


def give_way(snapshot: Snapshot, gpu_view: Snapshot, cpu_jobs: Sequence[JobView], d: D,
             rerun: Callable[[Snapshot], D]) -> tuple[D, HostYield | None]:
    """The GPU decision after a yield, and the yield; or ``(d, None)`` when none helps.

    ``d`` is the GPU stages' decision over ``gpu_view`` (the round's ``snapshot`` without
    CPU-only jobs); ``rerun`` runs those stages again over another view. A yield found by
    :func:`find_yield` stands only if the rerun places its GPU job (rule 4); at most
    :data:`MAX_TRIES` GPU jobs are tried. The caller adds the victims to ``preempted`` with
    :meth:`HostYield.notes` and leaves them out of the CPU stage."""
    tried: frozenset[JobId] = frozenset()
    while cpu_jobs and len(tried) < MAX_TRIES:
        y = find_yield(snapshot, cpu_jobs, d.placements, d.pending, tried)
        if y is None:
            break
        tried |= {y.for_job}
        again = rerun(y.gpu_view(gpu_view, cpu_jobs))
        if y.for_job in again.placements:
            return again, y
    return d, None


class _Room(NamedTuple):
    gpus: dict[str, int]
    cpus: dict[str, float]
    mem_gib: dict[str, float]


def find_yield(snapshot: Snapshot, cpu_jobs: Sequence[JobView],
               placements: Mapping[JobId, Placement], pending: Mapping[JobId, PendingReason],
               skip: frozenset[JobId] = frozenset()) -> HostYield | None:
    """The first yield by the module's rules 1-3 after a GPU decision (``placements``,
    ``pending``) over ``snapshot`` (the round's whole snapshot), or ``None``.

    ``skip``: GPU jobs already tried this round (their yield did not place them)."""
    quotas = snapshot.queue_quotas()
    running_cpu = [j for j in cpu_jobs if j.running and j.placement is not None]
    if not quotas or not running_cpu:
        return None
    guaranteed = {name for name, q in quotas.items()  # rule 3: within a host quota, kept
                  if q.nominal_cpus is not None or q.nominal_mem_gib is not None}
    settled = [cj for cj in running_cpu if cj.spec.queue not in guaranteed
               and snapshot.now_s - cj.progress_from_s >= YIELD_EXEMPT_S]  # (rule 3: churn)
    waiting = sorted((j for j in snapshot.jobs if j.spec.num_gpus > 0 and not j.running
                      and j.job_id in pending and j.job_id not in skip
                      and pending[j.job_id].kind is not PendingKind.QUOTA
                      and j.spec.queue in quotas), key=lambda j: j.spec.submit_time_s)
    if not waiting:
        return None
    nodes = {n.node_id: n for n in snapshot.up_nodes()}
    specs = {j.spec.job_id: j.spec for j in snapshot.jobs}
    room = _room(nodes, specs, placements, running_cpu)
    used = _queue_use(specs, placements, nodes)
    on_node = _cpu_jobs_by_node(settled)
    tried: set[tuple[object, ...]] = set()  # (jobs alike find alike: each kind is asked once)
    for j in waiting:
        kind = (j.spec.queue, j.spec.num_gpus, j.spec.flavors, j.spec.host)
        if kind in tried:
            continue
        tried.add(kind)
        q = quotas[j.spec.queue]
        ok = [n for n in nodes.values() if room.gpus[n.node_id] >= j.spec.num_gpus
              and _allowed(j, n, q, used)]
        needs = {n.node_id: gang_host_by_node(((n.node_id, j.spec.num_gpus),), j.spec.host,
                                              nodes)[0][1:] for n in ok}
        if not needs or any(_fits(room, n, *needs[n]) for n in needs):
            continue  # no node has its GPUs, or one feeds it already: it waits for more
        best: tuple[int, int, str, tuple[JobId, ...]] | None = None
        for order, n in enumerate(needs):
            victims = _victims(needs[n], j.spec.queue, room.cpus[n], room.mem_gib[n],
                               on_node.get(n, ()))
            if victims is not None and (best is None or (len(victims), order) < best[:2]):
                best = (len(victims), order, n, victims)
        if best is not None:
            return HostYield(j.job_id, j.spec.queue, best[2], best[3])
    return None


def _cpu_jobs_by_node(running_cpu: Sequence[JobView]
                      ) -> dict[str, list[tuple[JobView, float, float]]]:
    """Each node's running CPU-only jobs with the CPUs and memory they hold there."""
    out: dict[str, list[tuple[JobView, float, float]]] = {}
    for cj in running_cpu:
        for n, c, m in _held_by((cj,), {cj.job_id}):
            out.setdefault(n, []).append((cj, c, m))
    return out


def _room(nodes: Mapping[str, Node], specs: Mapping[JobId, JobSpec],
          placements: Mapping[JobId, Placement], running_cpu: Sequence[JobView]) -> _Room:
    """Free GPUs, CPUs and memory per up node after the round's gangs and the running CPU-only
    jobs."""
    room = _Room({n: node.gpus for n, node in nodes.items()},
                 {n: float(node.cpu_cores) for n, node in nodes.items()},
                 {n: float(node.mem_gib) for n, node in nodes.items()})
    for jid, p in placements.items():
        spec = specs.get(jid)
        host = spec.host if spec is not None else None
        for n, c, m in gang_host_by_node(p.gpus_by_node, host, nodes, p.host_by_node):
            room.cpus[n] -= c
            room.mem_gib[n] -= m
        for n, k in p.gpus_by_node:
            if n in room.gpus:
                room.gpus[n] -= k
    for cj in running_cpu:
        for n, c, m in _held_by((cj,), {cj.job_id}):
            if n in room.cpus:
                room.cpus[n] -= c
                room.mem_gib[n] -= m
    return room


def _queue_use(specs: Mapping[JobId, JobSpec], placements: Mapping[JobId, Placement],
               nodes: Mapping[str, Node]) -> dict[tuple[str, object], int]:
    """GPUs each queue holds after the round: ``(queue, None)`` in all, ``(queue, flavor)``
    per flavor."""
    used: dict[tuple[str, object], int] = {}
    for jid, p in placements.items():
        spec = specs.get(jid)
        if spec is None or p.num_gpus == 0:
            continue
        queue = spec.queue
        used[(queue, None)] = used.get((queue, None), 0) + p.num_gpus
        for n, k in p.gpus_by_node:
            f = nodes[n].flavor if n in nodes else None
            used[(queue, f)] = used.get((queue, f), 0) + k
    return used


def _allowed(j: JobView, node: Node, q: QueueQuota, used: Mapping[tuple[str, object], int]
             ) -> bool:
    """Whether ``j`` may take a whole gang on ``node`` within its queue's nominal quota."""
    g = j.spec.num_gpus
    if node.gpus < g or (j.spec.flavors and node.flavor not in j.spec.flavors):
        return False
    if q.flavors:
        fq = q.flavors.get(node.flavor)
        return fq is not None and used.get((q.name, node.flavor), 0) + g <= fq.nominal_gpus
    return used.get((q.name, None), 0) + g <= q.nominal_gpus


def _fits(room: _Room, n: str, cpus: float, mem_gib: float) -> bool:
    return room.cpus[n] + EPS >= cpus and room.mem_gib[n] + EPS >= mem_gib


def _victims(need: tuple[float, float], queue: str, free_cpus: float, free_mem_gib: float,
             here: Sequence[tuple[JobView, float, float]]) -> tuple[JobId, ...] | None:
    """The fewest CPU-only jobs of ``here`` (a node's, with what they hold there) not of
    ``queue`` whose stop lets ``need`` fit -- among sets of that size the newest (sets compared
    job by job, newest first) -- or ``None`` when stopping all of them would not. Past
    :data:`EXACT_UP_TO` such jobs, the newest are taken one by one until it fits."""
    mine = [t for t in here if t[0].spec.queue != queue]
    mine.sort(key=lambda t: (t[0].progress_from_s, t[0].spec.submit_time_s, t[0].job_id),
              reverse=True)
    short_cpus, short_mem = need[0] - free_cpus - EPS, need[1] - free_mem_gib - EPS
    if sum(c for _j, c, _m in mine) < short_cpus or sum(m for _j, _c, m in mine) < short_mem:
        return None
    if len(mine) > EXACT_UP_TO:
        return _greedy(mine, short_cpus, short_mem)
    for k in range(1, len(mine) + 1):
        for pick in combinations(mine, k):  # (newest-first order: the first that fits)
            if (sum(c for _j, c, _m in pick) >= short_cpus
                    and sum(m for _j, _c, m in pick) >= short_mem):
                return tuple(j.job_id for j, _c, _m in pick)
    return None  # (not reached: all of them fit)


def _greedy(mine: Sequence[tuple[JobView, float, float]], short_cpus: float,
            short_mem: float) -> tuple[JobId, ...]:
    out: list[JobId] = []
    for j, c, m in mine:
        if short_cpus <= 0 and short_mem <= 0:
            break
        out.append(j.job_id)
        short_cpus, short_mem = short_cpus - c, short_mem - m
    return tuple(out)


def _held_by(cpu_jobs: Sequence[JobView], ids: set[JobId]
             ) -> tuple[tuple[str, float, float], ...]:
    """What the running CPU-only jobs ``ids`` of ``cpu_jobs`` hold, as ``host_held`` books it
    (:func:`~tessera.sched.core.cpu_stage.split_cpu_only`)."""
    out: list[tuple[str, float, float]] = []
    for j in cpu_jobs:
        p = j.placement
        if j.job_id in ids and j.running and p is not None:
            out.extend(p.host_by_node or gang_host_by_node(p.gpus_by_node, j.spec.host, {}))
    return tuple(out)
