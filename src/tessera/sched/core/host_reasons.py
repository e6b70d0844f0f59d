"""Why a job waits when its GPUs are free but no server has the CPUs or memory to feed them.

:func:`host_shortage` is asked, in the explain phase, about a waiting job whose GPUs would fit
by count (so the GPU-only reasons -- capacity, fragmentation -- do not hold) while the round
counts host resources. It names the resource that runs short and the numbers a person can act
on: "needs 48 CPUs per node for 8 GPUs; the largest free on an allowed node is 24 CPUs".
:func:`host_infeasibility` is the submission-time twin: a job whose CPUs or memory no server
could feed even empty is refused at once, with the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tessera.model.gpus import GpuFlavor
from tessera.model.host_need import gpus_fed, per_gpu_need
from tessera.model.jobs import JobSpec
from tessera.model.nodes import Node
from tessera.sched.core.free_view import BlockInfo
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.snapshot import JobView


@dataclass(frozen=True, slots=True)
class HostShort:
    """Enough GPUs are free, but no node has the CPUs or memory the gang's share needs.

    Attributes:
        needs_gpus: the gang's GPUs.
        gpus_per_node: the GPUs whose share was compared (the gang, or one node's worth).
        needs_cpus / needs_mem_gib: what those GPUs need on one node.
        free_cpus / free_mem_gib: the most free on any node of an allowed flavor.
        cpu_only: what running CPU-only jobs hold, per queue, as ``(queue, cpus, mem_gib)``
            (set by the CPU stage, :func:`~tessera.sched.core.cpu_stage.place_cpu_jobs`;
            empty when none run), so the reason says who holds the CPUs.
    """

    needs_gpus: int
    gpus_per_node: int
    needs_cpus: float
    needs_mem_gib: float
    free_cpus: float
    free_mem_gib: float
    cpu_only: tuple[tuple[str, float, float], ...] = ()

    def __str__(self) -> str:
        k = self.gpus_per_node
        per = f"per node for {k} GPU{'s' if k != 1 else ''}"
        cpus = self.needs_cpus > self.free_cpus + 1e-9
        if cpus:
            text = (f"needs {self.needs_cpus:g} CPUs {per}; the largest free on an allowed node "
                    f"is {self.free_cpus:g} CPUs (GPUs are free, CPUs are not)")
        else:
            text = (f"needs {self.needs_mem_gib:g} GiB of host memory {per}; the largest free on "
                    f"an allowed node is {self.free_mem_gib:g} GiB (GPUs are free, memory is not)")
        if not self.cpu_only:
            return text
        held = ", ".join(f"{q!r} {c if cpus else m:g}" for q, c, m in self.cpu_only)
        return f"{text}; CPU-only jobs hold {'CPUs' if cpus else 'GiB'}: {held}"


@dataclass(frozen=True, slots=True)
class CpuShort:
    """A CPU-only job waits: no up node has its CPUs and memory free
    (:mod:`tessera.sched.core.cpu_stage`); the most free on any node, for comparison."""

    needs_cpus: float
    needs_mem_gib: float
    free_cpus: float
    free_mem_gib: float

    def __str__(self) -> str:
        if self.needs_cpus > self.free_cpus + 1e-9:
            return (f"CPU-only job needs {self.needs_cpus:g} CPUs on one node; the most free on "
                    f"any node is {self.free_cpus:g} CPUs")
        return (f"CPU-only job needs {self.needs_mem_gib:g} GiB of host memory on one node; the "
                f"most free on any node is {self.free_mem_gib:g} GiB")


def host_shortage(j: JobView, flavors: tuple[GpuFlavor, ...], free: FreeGpus,
                  local: bool, infos: Mapping[GpuFlavor, BlockInfo],
                  seen: dict[tuple[GpuFlavor, ...], tuple[Node, float, float]]
                  ) -> HostShort | None:
    """The host shortage that keeps ``j`` waiting, or ``None`` when host resources are not
    counted this round, its GPUs do not fit by count, or it would fit after all.

    ``infos``: the round's free blocks per flavor; ``seen``: a cache, per set of flavors, of
    their largest node and most free CPUs and memory (the explain phase asks for many jobs)."""
    host = free._host
    if host is None:
        return None
    g = j.spec.num_gpus
    fits = tuple(fl for fl in flavors if fl in infos and
                 (infos[fl].largest_block if local else infos[fl].total_free) >= g)
    if not fits:
        return None
    if any(free.find(fl, g, local, j.spec.host) is not None for fl in fits):
        return None
    known = seen.get(fits)
    if known is None:
        ids = [n for n, node in host.nodes.items() if node.flavor in fits]
        if not ids:
            return None
        known = seen[fits] = (host.nodes[max(ids, key=lambda n: host.nodes[n].gpus)],
                              *host.largest_free(ids))
    node, cpus, mem = known
    k = min(g, node.gpus)
    cpg, mpg = per_gpu_need(j.spec.host, g, node)
    return HostShort(g, k, cpg * k, mpg * k, cpus, mem)


def host_infeasibility(job: JobSpec, nodes: tuple[Node, ...],
                       flavors: tuple[GpuFlavor, ...]) -> str | None:
    """Why ``job``'s CPUs or memory can never be fed by the servers of ``flavors`` (checked
    once, at submission or load, like a 9-GPU gang on 8-GPU servers), or ``None``.

    Each server can feed at most ``min(its GPUs, its CPUs / CPUs per GPU, its memory / GiB
    per GPU)`` of the gang's GPUs, counting the whole server free; a gang that needs one node
    needs that on one server, any other gang summed over the servers.
    """
    if job.host is None:
        return None
    g = job.num_gpus
    pool = [n for n in nodes if n.flavor in flavors and n.gpus > 0]
    if not pool:
        return None
    fed = {
        "cpus": [min(n.gpus, gpus_fed(n.cpu_cores, math.inf, *_need(job, n)[:1], 0.0))
                 for n in pool],
        "memory": [min(n.gpus, gpus_fed(math.inf, n.mem_gib, 0.0, _need(job, n)[1]))
                   for n in pool],
    }
    for what, counts in fed.items():
        room = max(counts) if job.requires_locality else sum(counts)
        if room >= g:
            continue
        big = max(pool, key=lambda n: (n.cpu_cores if what == "cpus" else n.mem_gib))
        k = min(g, big.gpus)
        cpg, mpg = _need(job, big)
        where = "on one node (locality required)" if job.requires_locality else "in all"
        if what == "cpus":
            return (f"needs {cpg * k:g} CPUs per node for {k} GPUs ({cpg:g} per GPU); the "
                    f"largest server of an allowed flavor has {big.cpu_cores} CPUs, so its "
                    f"servers can feed {room} of its {g} GPUs {where}")
        return (f"needs {mpg * k:g} GiB of host memory per node for {k} GPUs ({mpg:g} per "
                f"GPU); the largest server of an allowed flavor has {big.mem_gib:g} GiB, so "
                f"its servers can feed {room} of its {g} GPUs {where}")
    return None


def _need(job: JobSpec, node: Node) -> tuple[float, float]:
    return per_gpu_need(job.host, job.num_gpus, node)
