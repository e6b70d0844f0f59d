"""Gang placement: consolidation, best fit, locality, and never over-allocating."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.sched.placement import FreeGpus
from tests.builders import make_cluster


def test_best_fit_prefers_the_tightest_node() -> None:
    c = make_cluster().node("v100", gpus=8).node("v100", gpus=4).build()
    free = FreeGpus(c.nodes)
    p = free.find("V100-16GB", 3, require_locality=False)
    assert p is not None and p.consolidated
    assert p.gpus_by_node[0][0] == "v100-16gb-0001"  # the 4-GPU node


def test_split_only_without_locality() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    free = FreeGpus(c.nodes)
    assert free.find("V100-16GB", 8, require_locality=True) is None
    p = free.find("V100-16GB", 8, require_locality=False)
    assert p is not None and not p.consolidated and p.num_gpus == 8


def test_split_prefers_one_rack() -> None:
    c = (make_cluster().node("v100", gpus=2, count=2, rack="a")
         .node("v100", gpus=4, count=1, rack="b").node("v100", gpus=1, count=1, rack="b")
         .build())
    free = FreeGpus(c.nodes)
    p = free.find("V100-16GB", 5, require_locality=False)
    assert p is not None
    racks = {n.rack for n in c.nodes if n.node_id in dict(p.gpus_by_node)}
    assert racks == {"b"}


def test_take_refuses_over_allocation() -> None:
    c = make_cluster().node("k80", gpus=2).build()
    free = FreeGpus(c.nodes)
    p = free.find("K80", 2, require_locality=True)
    assert p is not None
    free.take(p)
    assert free.find("K80", 1, require_locality=False) is None
    try:
        free.take(p)
    except ValueError:
        pass
    else:
        raise AssertionError("double take must fail")


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    gangs=st.lists(st.tuples(st.integers(1, 12), st.booleans()), min_size=1, max_size=12),
)
def test_property_all_or_nothing_never_over(nodes: list[int], gangs: list[tuple[int, bool]]
                                            ) -> None:
    b = make_cluster()
    for g in nodes:
        b.node("v100", gpus=g)
    c = b.build()
    free = FreeGpus(c.nodes)
    used = dict.fromkeys((n.node_id for n in c.nodes), 0)
    for size, local in gangs:
        p = free.find("V100-16GB", size, require_locality=local)
        if p is None:
            continue
        assert p.num_gpus == size
        if local:
            assert p.consolidated
        free.take(p)
        for node_id, k in p.gpus_by_node:
            used[node_id] += k
    cap = {n.node_id: n.gpus for n in c.nodes}
    assert all(used[n] <= cap[n] for n in cap)
