"""How many CPUs and how much host memory a gang holds on one server: the one rule.

Every part of Tessera that counts CPUs and host memory -- the decision core's free view, both
simulator drivers, the live service, ``explain`` and the submission check -- asks this module,
so the numbers they book and the numbers they check can never disagree. The rule, first match
wins:

1. **Explicit.** A placement whose ``host_by_node`` names the node (a resource-aware policy
   chose the amounts, or the core filled them from the job's demand when it placed the gang)
   holds exactly that.
2. **The job's demand.** A job with a :class:`~tessera.model.resources.HostDemand` holds its
   per-GPU amounts times the GPUs it has on the node (a per-job demand is split evenly over
   the gang's GPUs first). A CPU-only job (no GPUs) holds its total, split evenly over its
   nodes (one node unless it was placed otherwise).
3. **Proportional.** Otherwise its GPUs' share of the node (:func:`~tessera.model.resources.
   proportional_share`): 2 of 8 GPUs hold a quarter of the cores and a quarter of the memory.

All three are *linear in the GPUs on the node* for one job and node, which is what lets a
placement search ask "how many of this node's free GPUs can the host still feed?"
(:func:`gpus_fed`) instead of trying every split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from tessera.model.nodes import Node
from tessera.model.resources import HostDemand

#: Slack for float sums of fractional CPUs (1.5 + 1.5 + ... against 24 cores).
EPS = 1e-9


def per_gpu_need(host: HostDemand | None, gang_gpus: int, node: Node) -> tuple[float, float]:
    """``(cpus, mem_gib)`` one GPU of a ``gang_gpus``-GPU gang holds on ``node`` (rules 2, 3)."""
    if host is not None:
        return host.per_gpu_amounts(gang_gpus)
    if node.gpus <= 0:
        return 0.0, 0.0
    return node.cpu_cores / node.gpus, node.mem_gib / node.gpus


def gang_host_by_node(
    gpus_by_node: Iterable[tuple[str, int]],
    host: HostDemand | None,
    nodes: Mapping[str, Node],
    explicit: tuple[tuple[str, float, float], ...] = (),
) -> tuple[tuple[str, float, float], ...]:
    """``((node_id, cpus, mem_gib), ...)`` a gang holds on each of its nodes (all rules).

    ``explicit`` is the placement's ``host_by_node``; a node it does not name (or a node
    unknown to ``nodes``, e.g. one that went down) falls to the job's demand or proportional.
    """
    pairs = tuple(gpus_by_node)
    given = {n: (c, m) for n, c, m in explicit}
    gang = sum(c for _n, c in pairs)
    if gang == 0 and host is not None and pairs:  # a CPU-only job: its total, split over nodes
        cpus, mem = host.total(0)
        return tuple(((n, *given[n]) if n in given else (n, cpus / len(pairs), mem / len(pairs)))
                     for n, _c in pairs)
    out = []
    for node_id, count in pairs:
        if node_id in given:
            c, m = given[node_id]
            out.append((node_id, c, m))
            continue
        node = nodes.get(node_id)
        if node is None:
            continue
        cpg, mpg = per_gpu_need(host, gang, node)
        out.append((node_id, cpg * count, mpg * count))
    return tuple(out)


def gpus_fed(free_cpus: float, free_mem_gib: float, cpus_per_gpu: float,
             mem_gib_per_gpu: float) -> int | float:
    """How many GPUs the free CPUs and memory can feed at the given per-GPU need
    (``math.inf`` when the need is zero)."""
    most = math.inf
    if cpus_per_gpu > 0:
        most = (free_cpus + EPS) / cpus_per_gpu
    if mem_gib_per_gpu > 0:
        most = min(most, (free_mem_gib + EPS) / mem_gib_per_gpu)
    if most >= 1e12:  # (a vanishing need: no GPU count is limited by it)
        return math.inf
    return max(math.floor(most), 0)
