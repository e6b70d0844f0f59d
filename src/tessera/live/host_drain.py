"""The launch gate for CPUs and memory a stopping run (CPU-only, or with ``host:``) still holds.

A planned run launches only once every GPU it needs is free (:func:`tessera.live.launches.act`):
a run planned onto GPUs that a preempted run still drains waits out that run's grace period. A
CPU-only run holds no GPUs, so that rule never made anything wait for it -- and a GPU job that
a CPU-only job of another queue gave way to (:mod:`tessera.sched.core.cpu_yield`) is planned
onto the very CPUs and memory that run holds until it exits. :func:`waits_for_host` is the same
rule for those: while a CPU-only run on one of its nodes is still stopping, a planned run waits
unless the node's CPUs and memory, less what every launched run there holds (running, stopping,
or launched earlier in the same pass of the launch loop), already hold its own share -- two runs
planned onto one draining node in one round launched together before, each compared with the
node less the runs launched before the pass. Amounts are the decision core's one rule
(:func:`~tessera.model.host_need.gang_host_by_node`), so the gate and the decision agree.

The same holds for a stopping GPU run of a job with ``host:`` (:func:`host_draining`): a
CPU-only job needs no GPUs, so the GPU gate let it launch onto the CPUs and memory such a run
still held. And a stopping CPU-only run still counts against its queue's ``cpus``/``memory``
quota until it exits (:func:`draining_quota_use`, ``Snapshot.host_draining``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from tessera.live.loop_parts import ServiceParts
from tessera.live.store import Allocation, Store
from tessera.model.host_need import EPS, gang_host_by_node
from tessera.model.nodes import Node

__all__ = ["cpu_only_draining", "draining_quota_use", "host_draining", "waits_for_host"]


def cpu_only_draining(holding: Sequence[Allocation]) -> set[str]:
    """The nodes where a CPU-only run is stopping (usually empty)."""
    return {n for a in holding if a.status == "stopping" and a.placement.num_gpus == 0
            for n, _k in a.placement.gpus_by_node}


def host_draining(svc: ServiceParts, holding: Sequence[Allocation]) -> set[str]:
    """The nodes where a run holding CPUs and memory it asked for is stopping: a CPU-only run
    (:func:`cpu_only_draining`) or a GPU run of a job with ``host:`` (usually empty).

    The decision core sees neither (a stopping run's job is left out of the snapshot), so it
    plans other runs onto the CPUs and memory they hold until they exit; the GPU gate holds
    back only runs that need those GPUs. A CPU-only job planned onto a node where a GPU run
    with ``host: {cpus: 16, memory: 80Gi}`` was stopping launched at once, beside it, with
    the same CPUs and memory. A GPU run without ``host:`` holds no CPUs of its own (its share
    is neither pinned nor capped), so its nodes are not listed."""
    out = cpu_only_draining(holding)
    for a in holding:
        if a.status != "stopping" or a.placement.num_gpus == 0:
            continue
        rec = svc.store.get(a.job_id)
        if rec is not None and rec.job.spec.host is not None:
            out.update(n for n, _k in a.placement.gpus_by_node)
    return out


def draining_quota_use(store: Store, holding: Sequence[Allocation]
                       ) -> tuple[tuple[str, float, float], ...]:
    """``((queue, cpus, mem_gib), ...)`` of the CPU-only runs that are stopping
    (``Snapshot.host_draining``): a queue's ``cpus``/``memory`` quota is charged what they
    hold until they exit, as ``/api/queues`` counts them. The decision core sees none of
    their jobs (a cancelled job is no longer active; a preempted one waits), and counted a
    queue that cancelled a job at its quota as empty: a job submitted next started beside
    the draining run. One store read per stopping CPU-only run (usually none)."""
    out: list[tuple[str, float, float]] = []
    for a in holding:
        if a.status != "stopping" or a.placement.num_gpus != 0:
            continue
        rec = store.get(a.job_id)
        if rec is not None:
            out.append((rec.queue, sum(c for _n, c, _m in a.placement.host_by_node),
                        sum(m for _n, _c, m in a.placement.host_by_node)))
    return tuple(out)


def waits_for_host(svc: ServiceParts, a: Allocation, holding: Sequence[Allocation],
                   draining: set[str], started: Set[tuple[str, int]] = frozenset()) -> bool:
    """Whether planned run ``a`` must wait for a stopping CPU-only run's CPUs or memory on
    one of ``draining``'s nodes (see the module docstring); ``started``: the runs of
    ``holding`` still marked planned there that the launch loop launched in this pass."""
    nodes = {n.node_id: n for n in svc.cluster.nodes}
    mine = [x for x in _held(svc, a, nodes) if x[0] in draining and x[0] in nodes]
    if not mine:
        return False
    free = {n: [float(nodes[n].cpu_cores), float(nodes[n].mem_gib)] for n, _c, _m in mine}
    for h in holding:
        key = (h.job_id, h.run)
        if key == (a.job_id, a.run) or (h.status == "planned" and key not in started
                                         and key not in svc.launching):
            continue  # (a planned run launched earlier in this pass holds its share too)
        for n, c, m in _held(svc, h, nodes):
            if n in free:
                free[n][0] -= c
                free[n][1] -= m
    return any(free[n][0] + EPS < c or free[n][1] + EPS < m for n, c, m in mine)


def _held(svc: ServiceParts, a: Allocation, nodes: Mapping[str, Node]
          ) -> tuple[tuple[str, float, float], ...]:
    rec = svc.store.get(a.job_id)
    host = rec.job.spec.host if rec is not None else None
    return gang_host_by_node(a.placement.gpus_by_node, host, nodes, a.placement.host_by_node)
