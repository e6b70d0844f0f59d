"""CPU-only bundles on Ray and the node marks that hold them to their node (issue 33).

A run's bundles carry no Ray node id (Tessera's node names are the cluster
description's, not Ray's); GPU bundles are held where the scheduler put them by their flavor and
NVLink-domain resources. A CPU-only bundle has neither, so a node may offer a *node mark*,
``tessera_node:<node id>`` (one unit; ``ray start --resources '{"tessera_node:cpu-0": 1}'``), and
a CPU-only bundle asks :data:`NODE_SHARE` of its node's mark whenever the cluster offers node
marks at all (:func:`cpu_bundle`). A cluster that offers none (the embedded head, one Ray node
for the whole cluster; an unlabelled external one) runs CPU-only bundles wherever Ray finds
their CPUs, and the run's events say so.

A CPU-only bundle that fits no node is explained by :func:`cpu_only_short` (called from
:func:`~tessera.live.executors.ray.cluster.unplaceable_reason`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NODE_RESOURCE_PREFIX = "tessera_node:"
"""Prefix of the Ray custom resource that marks the Ray node standing for a Tessera node."""
NODE_SHARE = 0.001
"""What one CPU-only bundle asks of its node's mark (a node offers 1 unit)."""


def offers_node_marks(node_totals: Iterable[Mapping[str, float]]) -> bool:
    """Whether any alive Ray node offers a ``tessera_node:<id>`` mark (the cluster is
    labelled: a CPU-only bundle then asks for its node's)."""
    return any(k.startswith(NODE_RESOURCE_PREFIX) for n in node_totals for k in n)


def cpu_bundle(node: str, cpus: float, mem_gib: float, pin: bool) -> dict[str, float]:
    """A CPU-only run's bundle on ``node``: its ``CPU`` count, ``memory`` in bytes (only when
    it asks memory), no ``GPU`` and no flavor or domain resource, and -- with ``pin`` -- a
    share of the node's mark, so Ray puts it on the Ray node standing for ``node`` (the node
    the CPU stage chose, away from NVLink domains) and nowhere else.

    Raises:
        ValueError: ``cpus`` not above zero (a CPU-only run holds CPUs; the request parser
            refuses ``gpus: 0`` without them).
    """
    if not cpus > 0:
        raise ValueError(f"a CPU-only bundle on node {node} needs CPUs > 0, not {cpus}")
    b = {"CPU": float(cpus)}
    if mem_gib > 0:
        b["memory"] = float(int(mem_gib * 2**30))
    if pin:
        b[f"{NODE_RESOURCE_PREFIX}{node}"] = NODE_SHARE
    return b


def cpu_only_short(b: Mapping[str, float], marks: list[str],
                   nodes: list[Mapping[str, float]]) -> str:
    """Why a CPU-only bundle fits no node: its node mark offered nowhere, or no node (with
    the mark) has its CPUs and memory."""
    want = f"{b.get('CPU', 0.0):g} CPUs and {b.get('memory', 0.0) / 2**30:g} GiB of memory"
    missing = [k for k in marks if not any(n.get(k, 0.0) > 0 for n in nodes)]
    if missing:
        return (f"no Ray node offers {', '.join(missing)} for a CPU-only bundle of {want} "
                f"(start that node with --resources '{{\"{missing[0]}\": 1}}')")
    fit = [n for n in nodes if all(n.get(k, 0.0) >= b[k] for k in marks)]
    most_cpus = max((n.get("CPU", 0.0) for n in fit), default=0.0)
    most_mem = max((n.get("memory", 0.0) for n in fit), default=0.0) / 2**30
    where = f"with {', '.join(marks)} " if marks else ""
    return (f"no Ray node {where}has {want} for a CPU-only bundle (the largest has "
            f"{most_cpus:g} CPUs, {most_mem:g} GiB)")
