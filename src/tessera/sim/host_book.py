"""CPUs and host memory booked per node by a simulated world, next to its GPUs.

The decision core places a gang only where the node's free CPUs and memory can feed it
(:mod:`tessera.sched.core.host_free`); the world books what each gang it starts holds and gives
it back when the gang stops, by the one rule of :func:`tessera.model.host_need.
gang_host_by_node`. A start that would over-commit a node is a bug in a decision, so it raises
instead of running on an impossible server. A workload where no job asks for host resources
books nothing (:meth:`HostBook.of` returns ``None``): the GPU-only simulation is unchanged.
"""

from __future__ import annotations

from tessera.model.cluster import ClusterSpec
from tessera.model.host_need import EPS, gang_host_by_node
from tessera.model.jobs import JobSpec, Workload
from tessera.sched.core.snapshot import Placement


class HostOvercommitError(RuntimeError):
    """A gang was started where its node lacks the CPUs or memory it holds."""


class HostBook:
    """Free CPUs and memory per node, and what each running job holds."""

    __slots__ = ("_held", "cpus", "mem_gib", "nodes")

    def __init__(self, cluster: ClusterSpec) -> None:
        self.nodes = {n.node_id: n for n in cluster.nodes}
        self.cpus = {n.node_id: float(n.cpu_cores) for n in cluster.nodes}
        self.mem_gib = {n.node_id: float(n.mem_gib) for n in cluster.nodes}
        self._held: dict[str, tuple[tuple[str, float, float], ...]] = {}

    @classmethod
    def of(cls, cluster: ClusterSpec, workload: Workload) -> HostBook | None:
        """A book when some job of ``workload`` asks for CPUs or memory, else ``None``."""
        if any(j.host is not None for j in workload.jobs):
            return cls(cluster)
        return None

    def start(self, spec: JobSpec, placement: Placement) -> None:
        """Book what ``spec``'s gang holds on ``placement``'s nodes.

        Raises:
            HostOvercommitError: a node would hold more CPUs or memory than it has.
        """
        held = gang_host_by_node(placement.gpus_by_node, spec.host, self.nodes,
                                 placement.host_by_node)
        for n, c, m in held:
            if self.cpus[n] + EPS < c or self.mem_gib[n] + EPS < m:
                raise HostOvercommitError(
                    f"job {spec.job_id} on {n} holds {c:g} CPUs and {m:g} GiB, but only "
                    f"{self.cpus[n]:g} CPUs and {self.mem_gib[n]:g} GiB are free")
        for n, c, m in held:
            self.cpus[n] -= c
            self.mem_gib[n] -= m
        self._held[spec.job_id] = held

    def stop(self, spec: JobSpec) -> None:
        """Give back what ``spec``'s gang held (nothing if it held nothing)."""
        for n, c, m in self._held.pop(spec.job_id, ()):
            self.cpus[n] += c
            self.mem_gib[n] += m
