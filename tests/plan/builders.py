"""Small builders for planner tests: devices with chosen costs on chosen nodes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

from tessera.model.cluster import Link, LinkKind, Node, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.perf.comm import allreduce_time_s, ring_over_nodes
from tessera.perf.steptime import DeviceCost
from tessera.plan.dp import DpDevice


def device(flavor: str, alpha_s: float, beta_s: float, cap: int, node: Node) -> DpDevice:
    return DpDevice(DeviceCost(resolve_flavor(flavor), alpha_s, beta_s, cap), node)


def node(name: str, flavor: str = "V100", gpus: int = 8,
         inter: LinkKind = LinkKind.INFINIBAND) -> Node:
    return make_nodes(resolve_flavor(flavor), 1, gpus, prefix=name, inter_link=Link.of(inter))[0]


def compositions(total: int, caps: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every way to write ``total`` as a sum of len(caps) integers 0 <= x_i <= caps[i]."""
    if not caps:
        if total == 0:
            yield ()
        return
    for first in range(min(total, caps[0]) + 1):
        for rest in compositions(total - first, caps[1:]):
            yield (first, *rest)


def brute_force_step_s(devices: Sequence[DpDevice], global_bsz: int, grad_bytes: float,
                       max_micro_steps: int) -> float:
    """min over device subsets and integer splits of max compute + all-reduce."""
    best = math.inf
    for r in range(1, len(devices) + 1):
        for subset in itertools.combinations(devices, r):
            caps = [d.cost.max_local_bsz * max_micro_steps for d in subset]
            if sum(caps) < global_bsz:
                continue
            per_node: dict[str, tuple[Node, int]] = {}
            for d in subset:
                n, c = per_node.get(d.node.node_id, (d.node, 0))
                per_node[d.node.node_id] = (n, c + 1)
            comm = allreduce_time_s(grad_bytes, ring_over_nodes(list(per_node.values())))
            compute = min(
                max(d.cost.step_time_s(b) for d, b in zip(subset, split, strict=True))
                for split in compositions(global_bsz, caps)
            )
            best = min(best, compute + comm)
    return best
