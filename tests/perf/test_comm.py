"""Ring all-reduce and point-to-point times (tessera.perf.comm)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tessera.errors import SpecError
from tessera.model.cluster import Link, LinkKind, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.perf.comm import (
    RingPath,
    allreduce_time_s,
    boundary_link,
    p2p_time_s,
    ring_over_nodes,
)


@pytest.mark.parametrize(
    ("n", "bytes_", "bw", "lat_us", "expected_s"),
    [
        (1, 1e9, 10.0, 5.0, 0.0),
        (2, 1e9, 10.0, 0.0, 0.1),                  # 2·1/2 · 1 GB / 10 GB/s
        (4, 100e6, 12.5, 5.0, 30e-6 + 0.012),      # 6 latency steps + 1.5 · 8 ms
        (8, 0.0, 12.5, 5.0, 0.0),
        (12, 102.4e6, 1.25, 0.0, 2 * 11 / 12 * 102.4e6 / 1.25e9),  # ResNet-50 fp32, 10 GbE
    ],
    ids=["one-rank", "two-ranks", "four-ranks-latency", "no-bytes", "resnet50-10gbe"],
)
def test_ring_allreduce_formula(n: int, bytes_: float, bw: float, lat_us: float,
                                expected_s: float) -> None:
    assert allreduce_time_s(bytes_, RingPath(n, bw, lat_us)) == pytest.approx(expected_s)


def test_resnet50_on_10gbe_matches_reference_table() -> None:
    # hetero_training.md §4.2: 25.6 M fp32 gradients, 12 ranks, 10 GbE -> about 150 ms.
    t = allreduce_time_s(25.6e6 * 4, RingPath(12, 1.25, 0.0))
    assert t == pytest.approx(0.150, rel=0.01)


def test_ring_inside_one_node_uses_intra_link() -> None:
    (node,) = make_nodes(resolve_flavor("A100-40GB"), 1, 8)
    ring = ring_over_nodes([(node, 8)])
    assert ring.n_workers == 8
    assert ring.bw_gbps == node.intra_link.bw_gbps


def test_ring_across_nodes_is_limited_by_slowest_link() -> None:
    fast = make_nodes(resolve_flavor("A100-40GB"), 1, 8, prefix="a")[0]
    slow = make_nodes(resolve_flavor("T4"), 1, 4, prefix="t",
                      inter_link=Link.of(LinkKind.ETHERNET))[0]
    ring = ring_over_nodes([(fast, 8), (slow, 4)])
    assert ring.n_workers == 12
    assert ring.bw_gbps == Link.of(LinkKind.ETHERNET).bw_gbps
    assert ring.latency_us == Link.of(LinkKind.ETHERNET).latency_us


def test_single_gpu_on_a_node_does_not_use_its_intra_link() -> None:
    pcie_node = make_nodes(resolve_flavor("T4"), 1, 4, prefix="t")[0]   # PCIe 12 GB/s inside
    a = make_nodes(resolve_flavor("A100-40GB"), 1, 8, prefix="a")[0]
    ring = ring_over_nodes([(a, 2), (pcie_node, 1)])
    assert ring.bw_gbps == min(a.inter_link.bw_gbps, a.intra_link.bw_gbps,
                               pcie_node.inter_link.bw_gbps)


def test_empty_ring_is_an_error() -> None:
    with pytest.raises(SpecError):
        ring_over_nodes([])


def test_p2p_and_boundary_link() -> None:
    a, b = make_nodes(resolve_flavor("V100"), 2, 8)
    assert boundary_link(a, a) == a.intra_link
    assert boundary_link(a, b) == a.inter_link
    link = Link(LinkKind.INFINIBAND, 10.0, 5.0)
    assert p2p_time_s(1e9, link) == pytest.approx(0.1 + 5e-6)
    assert p2p_time_s(0, link) == 0.0


def test_ring_inside_one_nvlink_domain_moves_at_nvlink_speed() -> None:
    # Two 8-GPU A100 servers (NVLink 300 GB/s inside, InfiniBand 12.5 GB/s between).
    a, b, c = make_nodes(resolve_flavor("A100-80GB"), 3, 8)
    a, b = replace(a, nvlink_domain="nvl0"), replace(b, nvlink_domain="nvl0")
    c = replace(c, nvlink_domain="nvl1")
    inside = ring_over_nodes([(a, 8), (b, 8)])
    assert (inside.n_workers, inside.bw_gbps, inside.latency_us) == (16, 300.0, 5.0)
    # 1 GB all-reduce over 16 ranks: 30 latency steps + 2·15/16 · 1 GB at 300 GB/s = 6.40 ms
    assert allreduce_time_s(1e9, inside) == pytest.approx(30 * 5e-6 + 1.875e9 / 300e9)
    # the same ring across two domains is charged at the slower (InfiniBand) link: 150 ms
    across = ring_over_nodes([(a, 8), (c, 8)])
    assert across.bw_gbps == 12.5
    assert allreduce_time_s(1e9, across) == pytest.approx(30 * 5e-6 + 1.875e9 / 12.5e9)
    assert boundary_link(a, b).bw_gbps == 300.0 and boundary_link(a, c).bw_gbps == 12.5
    # no domain named: two servers never share NVLink
    plain = ring_over_nodes([(replace(a, nvlink_domain=None), 8),
                             (replace(b, nvlink_domain=None), 8)])
    assert plain.bw_gbps == 12.5
