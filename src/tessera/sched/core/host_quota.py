"""Queues' CPU and host-memory quotas, charged by CPU-only jobs (Kueue's ``cpu``/``memory``).

A queue's quota may name ``cpus`` and ``memory`` beside its GPUs
(``QueueQuota.nominal_cpus`` / ``nominal_mem_gib``; absent: no limit). What a queue *uses* of
them is what its CPU-only jobs (``gpus: 0``, :mod:`tessera.sched.core.cpu_stage`) hold: each
running one its placement's amounts, each waiting one its ask. A GPU job's CPUs and memory come
with its GPUs and are charged to its GPU quota, not here -- so a queue that runs only GPU jobs
never meets this quota, and one that runs CPU-only jobs cannot take more than it was given.

:class:`HostQuotaBook` is the CPU stage's ledger for one round: it starts from the running
CPU-only jobs and the CPU-only runs still stopping (``Snapshot.host_draining``: they hold
their CPUs until they exit), :meth:`HostQuotaBook.held` says whether a waiting job would take
its queue over (the reason it then waits, :class:`HostQuotaHeld`), and
:meth:`HostQuotaBook.charge` books a job the stage places. There is no borrowing: the
nominal amount is the limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tessera.model.host_need import EPS
from tessera.model.jobs import JobSpec
from tessera.sched.core.quotas import QueueQuota
from tessera.sched.core.snapshot import JobView

__all__ = ["HostQuotaBook", "HostQuotaHeld", "cpu_only_use", "host_quota_infeasibility"]


@dataclass(frozen=True, slots=True)
class HostQuotaHeld:
    """A CPU-only job waits: starting it would take its queue over its CPU or memory quota.

    Attributes:
        queue: the queue.
        resource: ``"cpus"`` or ``"memory"`` (GiB), the first quota it would exceed.
        used: what the queue's CPU-only jobs hold now (CPUs or GiB).
        nominal: the queue's quota of that resource.
        needs: the job's ask.
    """

    queue: str
    resource: str
    used: float
    nominal: float
    needs: float

    def __str__(self) -> str:
        unit = "CPUs" if self.resource == "cpus" else "GiB of host memory"
        return (f"queue {self.queue!r} at its {'CPU' if self.resource == 'cpus' else 'memory'} "
                f"quota: its CPU-only jobs hold {self.used:g} of {self.nominal:g} {unit}; "
                f"needs {self.needs:g}")


def cpu_only_use(jobs: Iterable[JobView]) -> dict[str, tuple[float, float]]:
    """``{queue: (cpus, mem_gib)}`` the running CPU-only jobs among ``jobs`` hold."""
    out: dict[str, tuple[float, float]] = {}
    for j in jobs:
        p = j.placement
        if j.spec.num_gpus != 0 or not j.running or p is None:
            continue
        if p.host_by_node:
            cpus, mem = sum(c for _n, c, _m in p.host_by_node), sum(m for *_x, m in p.host_by_node)
        else:
            cpus, mem = _ask(j.spec)
        c0, m0 = out.get(j.spec.queue, (0.0, 0.0))
        out[j.spec.queue] = (c0 + cpus, m0 + mem)
    return out


def _ask(spec: JobSpec) -> tuple[float, float]:
    return spec.host.total(0) if spec.host is not None else (0.0, 0.0)


class HostQuotaBook:
    """One round's CPU and memory use per queue against its quota (see the module docstring).

    Args:
        quotas: the queues' quotas (``Snapshot.queue_quotas()``).
        running: the running CPU-only jobs (others are ignored).
        draining: ``(queue, cpus, mem_gib)`` of CPU-only runs still stopping
            (``Snapshot.host_draining``): they hold their CPUs and memory until they exit, so a
            queue at its quota that cancels a job cannot start another beside it.
    """

    def __init__(self, quotas: Mapping[str, QueueQuota], running: Iterable[JobView],
                 draining: Iterable[tuple[str, float, float]] = ()) -> None:
        self.limits = {name: (q.nominal_cpus, q.nominal_mem_gib) for name, q in quotas.items()
                       if q.nominal_cpus is not None or q.nominal_mem_gib is not None}
        self.used = cpu_only_use(running) if self.limits else {}
        for queue, cpus, mem in draining:
            if queue in self.limits:
                c, m = self.used.get(queue, (0.0, 0.0))
                self.used[queue] = (c + cpus, m + mem)

    def held(self, spec: JobSpec) -> HostQuotaHeld | None:
        """Why CPU-only ``spec`` may not start now (its queue would go over), or ``None``."""
        limit = self.limits.get(spec.queue)
        if limit is None:
            return None
        used = self.used.get(spec.queue, (0.0, 0.0))
        for k, (what, nominal) in enumerate((("cpus", limit[0]), ("memory", limit[1]))):
            need = _ask(spec)[k]
            if nominal is not None and used[k] + need > nominal + EPS:
                return HostQuotaHeld(spec.queue, what, used[k], nominal, need)
        return None

    def charge(self, spec: JobSpec) -> None:
        """Book CPU-only ``spec`` as placed this round."""
        if spec.queue in self.limits:
            c, m = self.used.get(spec.queue, (0.0, 0.0))
            cpus, mem = _ask(spec)
            self.used[spec.queue] = (c + cpus, m + mem)


def host_quota_infeasibility(spec: JobSpec, quota: QueueQuota) -> str | None:
    """Why CPU-only ``spec`` can never start under its queue's ``cpus``/``memory`` quota (it
    asks more than the whole quota), or may not (its queue has a memory quota and it asks no
    memory: it would be charged 0 GiB and run with no memory limit, so no number of such jobs
    would ever fill the quota -- a Kubernetes ResourceQuota on memory likewise requires every
    pod to request it), or ``None``; checked at submission. A quota of 0 CPUs or 0 GiB admits
    no CPU-only job at all, and says so first: a job without a memory ask was told to ask for
    memory, then refused for asking more than 0 GiB."""
    if spec.num_gpus != 0:
        return None
    cpus, mem = _ask(spec)
    for what, nominal, unit in (("cpus", quota.nominal_cpus, "CPUs"),
                                ("memory", quota.nominal_mem_gib, "GiB")):
        if nominal is not None and nominal <= EPS:  # (one step: no ask can ever fit)
            return (f"queue {quota.name!r} runs no CPU-only jobs (its {what} quota for them "
                    f"is 0 {unit})")
    if quota.nominal_mem_gib is not None and mem <= 0:
        return (f"CPU-only job asks no host memory; queue {quota.name!r} has a memory quota "
                f"for CPU-only jobs ({quota.nominal_mem_gib:g} GiB): ask for it "
                "(host: {memory: ...})")
    if quota.nominal_cpus is not None and cpus > quota.nominal_cpus + EPS:
        return (f"CPU-only job needs {cpus:g} CPUs; queue {quota.name!r} may hold at most "
                f"{quota.nominal_cpus:g} CPUs in CPU-only jobs (its cpus quota)")
    if quota.nominal_mem_gib is not None and mem > quota.nominal_mem_gib + EPS:
        return (f"CPU-only job needs {mem:g} GiB of host memory; queue {quota.name!r} may hold "
                f"at most {quota.nominal_mem_gib:g} GiB in CPU-only jobs (its memory quota)")
    return None
