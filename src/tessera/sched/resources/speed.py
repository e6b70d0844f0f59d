"""What a gang holds besides GPUs, and how fast that lets it train.

A gang's CPUs and host memory on each node come from, in order:

1. ``Placement.host_by_node`` -- what a resource-aware allocation gave it
   (:mod:`tessera.sched.resources.allocate`);
2. its own :class:`~tessera.model.resources.HostDemand`, when it declares one;
3. the GPU-proportional share of each node it runs on
   (:func:`~tessera.model.resources.proportional_share`).

:func:`host_speedup` turns that into the factor the simulator multiplies a running job's
steps/s by: its :class:`~tessera.model.resources.ResourceSensitivity` read at the CPUs and
memory it holds *per GPU*. A job without a sensitivity runs at 1.0, exactly as before, so every
GPU-only result stays what it was.
"""

from __future__ import annotations

from tessera.model.cluster import ClusterSpec, Node
from tessera.model.host_need import gang_host_by_node
from tessera.model.jobs import JobSpec
from tessera.model.resources import ResourceSensitivity, SensitivityPoint
from tessera.sched.core.snapshot import Placement

#: ``node_id -> (gpus, cpu_cores, mem_gib)``, one per cluster (clusters are immutable).
_SIZES: dict[int, tuple[ClusterSpec, dict[str, tuple[int, float, float]]]] = {}


_NODES: dict[int, tuple[ClusterSpec, dict[str, Node]]] = {}


def node_map(cluster: ClusterSpec) -> dict[str, Node]:
    """``node_id -> Node`` of ``cluster`` (cached per cluster)."""
    hit = _NODES.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    nodes = {n.node_id: n for n in cluster.nodes}
    if len(_NODES) > 64:
        _NODES.clear()
    _NODES[id(cluster)] = (cluster, nodes)
    return nodes


def node_sizes(cluster: ClusterSpec) -> dict[str, tuple[int, float, float]]:
    """``node_id -> (gpus, cpu_cores, mem_gib)`` of ``cluster`` (cached per cluster)."""
    hit = _SIZES.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    sizes = {n.node_id: (n.gpus, float(n.cpu_cores), float(n.mem_gib)) for n in cluster.nodes}
    if len(_SIZES) > 64:
        _SIZES.clear()
    _SIZES[id(cluster)] = (cluster, sizes)
    return sizes


def host_held(spec: JobSpec, placement: Placement,
              cluster: ClusterSpec) -> tuple[tuple[str, float, float], ...]:
    """``((node_id, cpus, mem_gib), ...)`` the gang holds: the one rule of
    :func:`tessera.model.host_need.gang_host_by_node`, which the core and the drivers book by."""
    return gang_host_by_node(placement.gpus_by_node, spec.host, node_map(cluster),
                             placement.host_by_node)


def host_speedup(spec: JobSpec, placement: Placement, cluster: ClusterSpec) -> float:
    """The factor on ``spec``'s steps/s from the CPUs and memory it holds on ``placement``.

    A data-parallel gang goes as fast as its slowest worker, so the factor is the smallest
    over its nodes of the sensitivity at that node's CPUs and memory per GPU. 1.0 for a job
    without a sensitivity.
    """
    sens = spec.sensitivity
    if sens is None:
        return 1.0
    gpus = dict(placement.gpus_by_node)
    worst = float("inf")
    for node_id, cpus, mem in host_held(spec, placement, cluster):
        g = gpus.get(node_id, 0)
        if g <= 0:
            continue
        worst = min(worst, sens.speedup_at(cpus / g, mem / g))
    return 1.0 if worst == float("inf") else worst


def best_point_within(sens: ResourceSensitivity, cpus_per_gpu: float,
                      mem_per_gpu: float) -> SensitivityPoint | None:
    """The fastest measured point within ``cpus_per_gpu`` and ``mem_per_gpu`` (fewest CPUs,
    then least memory, among equals), or ``None`` when none fits."""
    eps = 1e-9
    fits = [p for p in sens.points
            if p.cpus_per_gpu <= cpus_per_gpu + eps and p.mem_gib_per_gpu <= mem_per_gpu + eps]
    if not fits:
        return None
    return max(fits, key=lambda p: (p.speedup, -p.cpus_per_gpu, -p.mem_gib_per_gpu))
