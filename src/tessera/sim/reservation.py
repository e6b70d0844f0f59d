"""Steps 1 and 2 of a co-simulation: which MIG flavor serves, and which GPUs it holds.

The services are planned for the GPU their profiles were measured on, so the cluster must
hold nodes of exactly that flavor (:func:`profiled_mig_gpu`; MIG slices do not carry their
performance over between GPU generations). The plan's GPUs are then *reserved* as whole GPUs
of that flavor (:func:`reserve_gpus`): whole nodes first, largest first, and the remainder on
the smallest node that still holds it, so training keeps its biggest gangs. What is left is an
ordinary :class:`~tessera.model.cluster.ClusterSpec` (fewer GPUs on the partly reserved nodes,
with CPU cores and memory in proportion) on which the unchanged training simulator runs.

The rest of the co-simulation (streams, training, the result) is in :mod:`tessera.sim.cosim`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec, Node
from tessera.model.gpus import GpuFlavor
from tessera.share.mig import MigGpu, mig_gpu
from tessera.share.profiles import ProfileTable


@dataclass(frozen=True, slots=True)
class NodeReservation:
    """GPUs of one node held by the services."""

    node_id: str
    flavor: GpuFlavor
    node_gpus: int
    reserved: int

    @property
    def whole_node(self) -> bool:
        return self.reserved == self.node_gpus


@dataclass(frozen=True, slots=True)
class Reservation:
    """Where the plan's GPUs live and what is left for training."""

    flavor: GpuFlavor
    nodes: tuple[NodeReservation, ...]
    remaining: ClusterSpec

    @property
    def gpus(self) -> int:
        return sum(n.reserved for n in self.nodes)



# ---------------------------------------------------------------------------------------------
# 1. which MIG flavor


def profiled_mig_gpu(
    cluster: ClusterSpec, table: ProfileTable, wanted: GpuFlavor | None = None
) -> MigGpu:
    """The cluster's MIG flavor the profiles were measured on; a clear error otherwise.

    ``wanted`` (the services file's ``gpu:``) must agree with the profile table when given.
    """
    gpu = mig_gpu(table.gpu)
    profiled = gpu.flavor
    if wanted is not None and wanted != profiled:
        raise SpecError(
            f"the services ask for {wanted}, but the profiles were measured on {profiled}; "
            "give profiles measured on that GPU (--profiles DIR)"
        )
    flavors = {n.flavor for n in cluster.nodes if n.gpus > 0}
    if profiled not in flavors:
        mig = sorted(
            {n.flavor.short for n in cluster.nodes if n.gpus > 0 and n.flavor.mig_capable}
        )
        have = f"its MIG-capable GPUs are {', '.join(mig)}" if mig else "it has no MIG GPUs"
        raise SpecError(
            f"cluster {cluster.name!r} has no {profiled} nodes ({have}); the service profiles "
            f"exist only for {profiled}, and MIG slice performance does not carry over between "
            f"GPU models: add {profiled} nodes or give profiles measured on the cluster's GPU"
        )
    return gpu


# ---------------------------------------------------------------------------------------------
# 2. reservation


def reserve_gpus(cluster: ClusterSpec, flavor: GpuFlavor, gpus: int) -> Reservation:
    """Take ``gpus`` whole GPUs of ``flavor``, on as few nodes as possible.

    Whole nodes are taken largest first while the need is at least a node; the remainder goes to
    the smallest node that still holds it (best fit), else the largest left. Returns the
    reservation and the cluster that remains for training (nodes with fewer GPUs; nodes left
    with none dropped).

    Raises:
        SpecError: the flavor has fewer GPUs than needed, or nothing would be left to train on.
    """
    short = flavor.short
    pool = [n for n in cluster.nodes if n.flavor == flavor and n.gpus > 0]
    have = sum(n.gpus for n in pool)
    if gpus < 0:
        raise SpecError(f"cannot reserve {gpus} GPUs")
    if gpus > have:
        raise SpecError(
            f"the services need {gpus} {short} GPUs but cluster {cluster.name!r} has {have}"
        )
    take: dict[str, int] = {}
    free = sorted(pool, key=lambda n: (-n.gpus, n.node_id))
    need = gpus
    while need > 0:
        whole = next((n for n in free if n.gpus <= need), None)
        fits = [n for n in free if n.gpus >= need]
        if fits and (whole is None or whole.gpus < need):
            node = min(fits, key=lambda n: (n.gpus, n.node_id))  # best fit for the remainder
        else:
            node = whole if whole is not None else free[0]
        k = min(node.gpus, need)
        take[node.node_id] = k
        need -= k
        free.remove(node)
    reserved = tuple(
        NodeReservation(n.node_id, flavor, n.gpus, take[n.node_id])
        for n in cluster.nodes
        if n.node_id in take
    )
    kept: list[Node] = []
    for n in cluster.nodes:
        k = take.get(n.node_id, 0)
        if k == 0:
            kept.append(n)
        elif k < n.gpus:
            left = n.gpus - k
            kept.append(
                replace(
                    n,
                    gpus=left,
                    cpu_cores=max(1, n.cpu_cores * left // n.gpus),
                    mem_gib=n.mem_gib * left / n.gpus,
                )
            )
    if not kept:
        raise SpecError(
            f"the services take all {cluster.total_gpus} GPUs of cluster {cluster.name!r}; "
            "nothing is left for training"
        )
    name = f"{cluster.name} minus {gpus}x{short}" if gpus else cluster.name
    return Reservation(flavor, reserved, ClusterSpec(name, tuple(kept)))
