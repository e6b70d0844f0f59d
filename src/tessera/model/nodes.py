"""Servers ("nodes") and the links between their GPUs.

A :class:`Node` is one server: GPUs of one flavor, CPU cores, host memory, the rack it sits in,
and two :class:`Link` s -- how its GPUs talk to each other (``intra_link``: NVLink or PCIe) and
how it talks to other servers (``inter_link``: InfiniBand or Ethernet). The communication model
in ``perf`` reads the links; the decision core reads flavors, GPU counts and racks.

:func:`make_nodes` builds a group of identical servers with sensible defaults (NVLink for
Volta and later data-centre GPUs, PCIe otherwise; InfiniBand between servers; 32 servers a
rack). A :class:`~tessera.model.cluster.ClusterSpec` is a named tuple of nodes; the ways to
describe one (presets, compact strings, YAML) are in :mod:`tessera.model.cluster`, which
re-exports these names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor


class LinkKind(enum.StrEnum):
    """Kinds of interconnect, with typical per-direction bandwidth in GB/s and latency in µs."""

    NVLINK = "nvlink"
    """GPU-to-GPU NVLink inside a server."""
    PCIE = "pcie"
    """GPU-to-GPU over the PCIe switch inside a server."""
    INFINIBAND = "infiniband"
    """Server-to-server RDMA fabric."""
    ETHERNET = "ethernet"
    """Server-to-server TCP/IP."""


DEFAULT_LINK_BW_GBPS: dict[LinkKind, float] = {
    LinkKind.NVLINK: 150.0,
    LinkKind.PCIE: 12.0,
    LinkKind.INFINIBAND: 12.5,
    LinkKind.ETHERNET: 3.0,
}
DEFAULT_LINK_LATENCY_US: dict[LinkKind, float] = {
    LinkKind.NVLINK: 5.0,
    LinkKind.PCIE: 10.0,
    LinkKind.INFINIBAND: 5.0,
    LinkKind.ETHERNET: 30.0,
}


@dataclass(frozen=True, slots=True)
class Link:
    """An interconnect: its kind, bandwidth (GB/s, one direction) and latency (µs)."""

    kind: LinkKind
    bw_gbps: float
    latency_us: float

    @classmethod
    def of(cls, kind: LinkKind | str, bw_gbps: float | None = None) -> Link:
        k = LinkKind(kind)
        bw = DEFAULT_LINK_BW_GBPS[k] if bw_gbps is None else bw_gbps
        return cls(k, bw, DEFAULT_LINK_LATENCY_US[k])


def _default_intra(flavor: GpuFlavor) -> Link:
    nvlink = flavor.arch in {"Volta", "Ampere", "Hopper"} and flavor.short not in {"A10"}
    if not nvlink:
        return Link.of(LinkKind.PCIE)
    bw = {"Volta": 150.0, "Ampere": 300.0, "Hopper": 450.0}[flavor.arch]
    return Link.of(LinkKind.NVLINK, bw)


@dataclass(frozen=True, slots=True)
class Node:
    """One server.

    Attributes:
        node_id: unique name, e.g. ``v100-0003``.
        flavor: the flavor of all its GPUs.
        gpus: number of GPUs.
        cpu_cores: CPU cores.
        mem_gib: host memory.
        rack: rack (or switch) name; gangs prefer one node, then one rack.
        intra_link: how its GPUs talk to each other.
        inter_link: how it talks to other nodes.
        nvlink_domain: the NVLink (or NVSwitch) domain it belongs to, ``None`` when its GPUs
            reach no other server over NVLink. GPUs of one domain talk at ``intra_link`` speed
            even across servers (rack-scale NVLink such as GB200 NVL72).
        switch_path: the switches above it, nearest first (ToR, aggregation, core: the
            Lingjun table's ``ASW, PSW, DSW``); two nodes share a level when the names match
            there. Empty when unknown; ``rack`` is then the only level.
    """

    node_id: str
    flavor: GpuFlavor
    gpus: int
    cpu_cores: int
    mem_gib: float
    rack: str
    intra_link: Link
    inter_link: Link
    nvlink_domain: str | None = None
    switch_path: tuple[str, ...] = ()


def make_nodes(
    flavor: GpuFlavor,
    count: int,
    gpus: int,
    *,
    prefix: str | None = None,
    start: int = 0,
    cpu_cores: int | None = None,
    mem_gib: float | None = None,
    rack: str | None = None,
    nodes_per_rack: int = 32,
    intra_link: Link | None = None,
    inter_link: Link | None = None,
) -> list[Node]:
    """Build ``count`` identical nodes of ``gpus`` GPUs each."""
    f = flavor
    if count < 0 or gpus < 0:
        raise SpecError(f"node group {f.short}: count and gpus must be >= 0")
    pfx = prefix or f.short.lower()
    out = []
    for i in range(start, start + count):
        out.append(
            Node(
                node_id=f"{pfx}-{i:04d}",
                flavor=f,
                gpus=gpus,
                cpu_cores=cpu_cores if cpu_cores is not None else max(8, 8 * gpus),
                mem_gib=mem_gib if mem_gib is not None else max(64.0, 64.0 * gpus),
                rack=rack or f"{pfx}-rack{i // nodes_per_rack}",
                intra_link=intra_link or _default_intra(f),
                inter_link=inter_link or Link.of(LinkKind.INFINIBAND),
            )
        )
    return out
