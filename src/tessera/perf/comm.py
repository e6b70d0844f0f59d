"""Communication time: gradient all-reduce over a ring, and point-to-point transfers.

**Ring all-reduce.** n workers each hold S bytes of gradients and want the sum. Arranged in a
ring, they first *reduce-scatter* (n−1 steps, each sending S/n bytes to the neighbour) and then
*all-gather* (another n−1 steps of S/n). Every worker therefore sends ``2(n−1)/n · S`` bytes, and
every one of the ``2(n−1)`` steps pays the link latency once. A ring moves at the pace of its
slowest hop, so::

    t_allreduce = 2(n−1) · latency + 2(n−1)/n · S / bw_slowest

(NVIDIA nccl-tests, doc/PERFORMANCE.md, calls ``2(n−1)/n · S / t`` the *bus bandwidth*.)

**Which link is the slowest.** Tessera's cluster model gives each server an ``intra_link`` (GPU to
GPU inside it: NVLink or PCIe) and an ``inter_link`` (server to server: InfiniBand or Ethernet).
A ring that stays inside one server only uses its intra link. A ring that spans servers uses
each server's inter link once in and once out and its intra links for the hops inside a server,
so the bottleneck is the slowest of all those links.

**Topology domains.** Traffic that crosses a domain is charged at the slower link. A ring over
several servers of one NVLink domain (:attr:`~tessera.model.nodes.Node.nvlink_domain`, e.g. a
GB200 NVL72 rack) never leaves NVLink, so its slowest hop is the slowest *intra* link of those
servers; a ring that leaves its NVLink domain -- to another domain under the same ToR, or across
ToRs -- crosses servers over their inter links (InfiniBand or Ethernet) and moves at that
speed. Switches above the ToR add no charge of their own here: the model assumes a
non-blocking Clos fabric, so crossing an aggregation switch costs what crossing a ToR does.

**Compressed gradients** send fewer bytes, sometimes in several collectives or as an all-gather
(:func:`allgather_time_s`); :mod:`tessera.perf.compression` gives each scheme's collectives.

Bandwidths here are GB/s in one direction (10⁹ bytes per second), latencies µs.

>>> from tessera.model.cluster import Link, LinkKind
>>> ring = RingPath(n_workers=4, bw_gbps=12.5, latency_us=5.0)
>>> round(allreduce_time_s(100e6, ring) * 1e3, 2)   # 100 MB over 4 ranks at 12.5 GB/s
12.03
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.cluster import Link, Node


@dataclass(frozen=True, slots=True)
class RingPath:
    """The facts about a ring that decide its speed.

    Attributes:
        n_workers: ranks in the ring.
        bw_gbps: bandwidth of its slowest hop (GB/s, one direction).
        latency_us: per-step latency of its slowest hop.
    """

    n_workers: int
    bw_gbps: float
    latency_us: float

    def __post_init__(self) -> None:
        if self.n_workers < 1:
            raise SpecError("a ring needs at least one worker")
        if self.bw_gbps <= 0 or self.latency_us < 0:
            raise SpecError(f"bad link figures: {self.bw_gbps} GB/s, {self.latency_us} µs")


def allreduce_time_s(bytes_per_rank: float, ring: RingPath) -> float:
    """Ring all-reduce time of ``bytes_per_rank`` bytes; zero for a single worker."""
    n = ring.n_workers
    if n <= 1 or bytes_per_rank <= 0:
        return 0.0
    steps = 2 * (n - 1)
    return steps * ring.latency_us * 1e-6 + (steps / n) * bytes_per_rank / (ring.bw_gbps * 1e9)


def allgather_time_s(bytes_per_rank: Sequence[float], ring: RingPath) -> float:
    """Ring all-gather of one message per rank (sizes may differ); zero for a single worker.

    Every message travels n−1 hops, one per step, so the link into rank i carries every message
    but rank i's own: ``Σ S − S_i`` bytes. The ring finishes when the busiest link has, after
    ``n−1`` latency steps::

        t_allgather = (n−1) · latency + (Σ S − min S) / bw_slowest

    Compressed gradients that cannot be summed while encoded (3LC) are exchanged this way.
    """
    n = ring.n_workers
    if n <= 1 or len(bytes_per_rank) == 0:
        return 0.0
    moved = sum(bytes_per_rank) - min(bytes_per_rank)
    return (n - 1) * ring.latency_us * 1e-6 + moved / (ring.bw_gbps * 1e9)


def p2p_time_s(n_bytes: float, link: Link) -> float:
    """One point-to-point transfer (a pipeline stage handing activations on)."""
    if n_bytes <= 0:
        return 0.0
    return link.latency_us * 1e-6 + n_bytes / (link.bw_gbps * 1e9)


def ring_over_nodes(workers_per_node: Sequence[tuple[Node, int]]) -> RingPath:
    """The ring formed by ``count`` GPUs on each listed node.

    Args:
        workers_per_node: ``(node, gpus used on it)`` pairs; nodes with 0 GPUs are ignored.

    Returns:
        The ring's worker count and its slowest hop: the node's intra link when everything is
        on one node, else the slowest intra link (of nodes with ≥ 2 workers) or inter link.
    """
    used = [(node, c) for node, c in workers_per_node if c > 0]
    if not used:
        raise SpecError("a ring needs at least one worker")
    n = sum(c for _, c in used)
    links = slowest_links(used)
    return RingPath(n, min(lk.bw_gbps for lk in links), max(lk.latency_us for lk in links))


def slowest_links(used: Sequence[tuple[Node, int]]) -> tuple[Link, ...]:
    """The links a ring over ``used`` (node, workers) pairs traverses."""
    if len(used) == 1:
        return (used[0][0].intra_link,)
    domain = used[0][0].nvlink_domain
    if domain is not None and all(node.nvlink_domain == domain for node, _c in used):
        return tuple(node.intra_link for node, _c in used)
    links: list[Link] = []
    for node, c in used:
        links.append(node.inter_link)
        if c > 1:
            links.append(node.intra_link)
    return tuple(links)


def boundary_link(a: Node, b: Node) -> Link:
    """The link between GPUs on nodes ``a`` and ``b``: intra when on one node, the slower intra
    link when both are in one NVLink domain, else the slower inter link."""
    if a.node_id == b.node_id:
        return a.intra_link
    if a.nvlink_domain is not None and a.nvlink_domain == b.nvlink_domain:
        return min((a.intra_link, b.intra_link), key=lambda lk: lk.bw_gbps)
    return min((a.inter_link, b.inter_link), key=lambda lk: lk.bw_gbps)
