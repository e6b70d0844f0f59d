"""Gang placement with topology domains (issue 33, part 5): the smallest domain that holds a
gang, the locality wait for it, and small jobs kept away from intact domains."""

from __future__ import annotations

from dataclasses import replace

from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.free_view import Layout
from tessera.sched.core.options import PlacementOptions, needs_locality
from tessera.sched.core.placement import FreeGpus
from tests.builders import make_job, view

V100 = resolve_flavor("v100")


def _interleaved(domains: int = 2, per_domain: int = 2) -> ClusterSpec:
    """Nodes listed in an order unrelated to their domains (as hosts usually are): node i is
    in domain ``i % domains``, so consecutive nodes are never in one domain."""
    nodes = make_nodes(V100, domains * per_domain, 8)
    return ClusterSpec("nvl", tuple(replace(n, nvlink_domain=f"d{i % domains}")
                                    for i, n in enumerate(nodes)))


def _domains_of(c: ClusterSpec, parts: tuple[tuple[str, int], ...]) -> set[str | None]:
    by_id = {n.node_id: n for n in c.nodes}
    return {by_id[n].nvlink_domain for n, _g in parts}


def test_gang_goes_inside_one_nvlink_domain() -> None:
    c = _interleaved()
    p = FreeGpus(c.nodes).find(V100, 16, False)
    assert p is not None and p.num_gpus == 16
    assert _domains_of(c, p.gpus_by_node) == {"d0"}


def test_gang_takes_the_smallest_domain_that_holds_it() -> None:
    c = _interleaved(domains=2, per_domain=3)  # d0: nodes 0,2,4; d1: nodes 1,3,5
    ids = [n.node_id for n in c.nodes]
    free = {i: 8 for i in ids} | {ids[0]: 0}  # d0 has 16 free, d1 24
    p = FreeGpus(c.nodes, free).find(V100, 16, False)
    assert p is not None and _domains_of(c, p.gpus_by_node) == {"d0"}


def test_small_job_is_packed_into_a_broken_domain() -> None:
    c = _interleaved()  # nodes 0,2 in d0; 1,3 in d1
    ids = [n.node_id for n in c.nodes]
    free = {i: 8 for i in ids} | {ids[3]: 0}  # d1 is broken by a job on node 3
    p = FreeGpus(c.nodes, free).find(V100, 1, False)
    # best fit ties between three 8-free nodes; the one in the broken domain d1 wins
    assert p is not None and p.gpus_by_node == ((ids[1], 1),)


def test_small_job_still_takes_the_best_fitting_node() -> None:
    c = _interleaved()
    ids = [n.node_id for n in c.nodes]
    free = {i: 8 for i in ids} | {ids[0]: 3}  # d0 holds the fullest node
    p = FreeGpus(c.nodes, free).find(V100, 2, False)
    assert p is not None and p.gpus_by_node == ((ids[0], 2),)


def test_gang_inside_its_locality_wait_waits_for_a_domain() -> None:
    c = _interleaved()
    ids = [n.node_id for n in c.nodes]
    free = {i: 8 for i in ids} | {ids[0]: 4, ids[1]: 4}  # 24 free, 12 per domain
    gang = view(make_job("g", gpus=16))
    opts = PlacementOptions(locality_wait_s=600.0, largest_node_gpus=c.max_gpus_local())
    assert needs_locality(gang, 100.0, opts)  # larger than a node, not than a domain
    assert FreeGpus(c.nodes, free).find(V100, 16, True) is None
    assert not needs_locality(gang, 700.0, opts)  # the wait is over: any split
    p = FreeGpus(c.nodes, free).find(V100, 16, False)
    assert p is not None and p.num_gpus == 16 and _domains_of(c, p.gpus_by_node) == {"d0", "d1"}


def test_gang_larger_than_every_domain_never_waits() -> None:
    c = _interleaved()
    opts = PlacementOptions(locality_wait_s=600.0, largest_node_gpus=c.max_gpus_local())
    assert not needs_locality(view(make_job("g", gpus=24)), 0.0, opts)


def test_without_nvlink_domains_the_smallest_tor_then_aggregation_holds_the_gang() -> None:
    paths = [("t0", "a0"), ("t1", "a0"), ("t1", "a0"), ("t2", "a1"), ("t2", "a1"), ("t2", "a1")]
    c = ClusterSpec("sw", tuple(replace(n, switch_path=paths[i])
                                for i, n in enumerate(make_nodes(V100, 6, 8))))
    ids = [n.node_id for n in c.nodes]
    free = FreeGpus(c.nodes)
    p = free.find(V100, 16, False)
    assert p is not None and {n for n, _g in p.gpus_by_node} == {ids[1], ids[2]}  # ToR t1
    free.take(p)
    p = free.find(V100, 24, False)  # t2 holds 24 exactly
    assert p is not None and {n for n, _g in p.gpus_by_node} == set(ids[3:])
    free.take(p)
    assert free.find(V100, 16, True) is None  # no NVLink domain: local means one node
    assert free.find(V100, 16, False) is None  # only node 0 is left


def test_a_cluster_without_domains_keeps_its_layout_plain() -> None:
    assert Layout.of(tuple(make_nodes(V100, 4, 8))).domains is None
    assert Layout.of(_interleaved().nodes).domains is not None
