"""Gang placement: consolidation, best fit, locality, and never over-allocating."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.sched.core.free_book import FreeBook
from tessera.sched.core.free_view import Layout
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tests.builders import make_cluster, make_job

_K80 = resolve_flavor("K80")
_V100_16GB = resolve_flavor("V100-16GB")


def test_best_fit_prefers_the_tightest_node() -> None:
    c = make_cluster().node("v100", gpus=8).node("v100", gpus=4).build()
    free = FreeGpus(c.nodes)
    p = free.find(_V100_16GB, 3, require_locality=False)
    assert p is not None and p.consolidated
    assert p.gpus_by_node[0][0] == "v100-16gb-0001"  # the 4-GPU node


def test_split_only_without_locality() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    free = FreeGpus(c.nodes)
    assert free.find(_V100_16GB, 8, require_locality=True) is None
    p = free.find(_V100_16GB, 8, require_locality=False)
    assert p is not None and not p.consolidated and p.num_gpus == 8


def test_split_prefers_one_rack() -> None:
    c = (make_cluster().node("v100", gpus=2, count=2, rack="a")
         .node("v100", gpus=4, count=1, rack="b").node("v100", gpus=1, count=1, rack="b")
         .build())
    free = FreeGpus(c.nodes)
    p = free.find(_V100_16GB, 5, require_locality=False)
    assert p is not None
    racks = {n.rack for n in c.nodes if n.node_id in dict(p.gpus_by_node)}
    assert racks == {"b"}


def test_take_refuses_over_allocation() -> None:
    c = make_cluster().node("k80", gpus=2).build()
    free = FreeGpus(c.nodes)
    p = free.find(_K80, 2, require_locality=True)
    assert p is not None
    free.take(p)
    assert free.find(_K80, 1, require_locality=False) is None
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
        p = free.find(_V100_16GB, size, require_locality=local)
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


def _mixed_sizes_cluster() -> ClusterSpec:
    return (make_cluster().node("v100", gpus=4, count=3).node("v100", gpus=8, count=2)
            .node("k80", gpus=2, count=3).build())


def _booked(c: ClusterSpec, layout: Layout, booked: list[int]
            ) -> tuple[FreeBook, list[Placement]]:
    """A driver's book after the gangs ``booked`` draws were placed, and those gangs."""
    book = FreeBook(layout)
    held: list[Placement] = []
    setup = FreeGpus(c.nodes, None, layout)
    for i in booked:
        p = setup.find(_V100_16GB if i % 2 else _K80, 1 + i % 4, i % 3 == 0)
        if p is not None:
            setup.take(p)
            held.append(p)
            for n, k in p.gpus_by_node:
                book[n] -= k
    return book, held


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["find", "release", "info"]),
                              st.sampled_from([_V100_16GB, _K80]), st.integers(1, 10),
                              st.booleans()), min_size=1, max_size=20),
       booked=st.lists(st.integers(0, 7), min_size=0, max_size=6))
def test_property_a_round_over_a_book_answers_as_one_over_counts(
        ops: list[tuple[str, str, int, bool]], booked: list[int]) -> None:
    """Whatever a round asks, in whatever order (changes before or after its first look at a
    flavor), starting from a driver's book gives the same answers as starting from counts."""
    c = _mixed_sizes_cluster()
    layout = Layout.of(c.nodes)
    book, held = _booked(c, layout, booked)
    over_book = FreeGpus(c.nodes, base=book)
    plain = FreeGpus(c.nodes, dict(book), layout)
    booked_counts = dict(book)
    for op, flavor, gpus, local in ops:
        if op == "info":
            assert over_book.info(flavor) == plain.info(flavor)
        elif op == "release" and held:
            p = held.pop(gpus % len(held))
            over_book.release(p)
            plain.release(p)
        else:
            a, b = over_book.find(flavor, gpus, local), plain.find(flavor, gpus, local)
            assert a == b
            if a is not None:
                over_book.take(a)
                plain.take(a)
                held.append(a)
        assert over_book.total_free(flavor) == plain.total_free(flavor)
    for node in [*layout.capacity, "no-such-node"]:  # (each node's count, changed or not)
        assert over_book.free_on(node) == plain.free_on(node)
    assert all(over_book.can_take(p) == plain.can_take(p) for p in held)
    assert dict(book) == booked_counts  # the round's changes stay its own


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["find", "release_each", "info", "retake"]),
                              st.sampled_from([_V100_16GB, _K80]), st.integers(1, 10),
                              st.booleans()), min_size=1, max_size=20),
       booked=st.lists(st.integers(0, 7), min_size=0, max_size=6),
       from_book=st.booleans())
def test_property_release_each_and_take_if_free_answer_as_one_at_a_time(
        ops: list[tuple[str, str, int, bool]], booked: list[int], from_book: bool) -> None:
    """Giving several gangs back at once (before or after a flavor's first look), and taking a
    gang only if it is free, leave a round where releasing and taking one by one would: the
    same counts, totals, and answers (bucket order included)."""
    c = _mixed_sizes_cluster()
    layout = Layout.of(c.nodes)
    book, held = _booked(c, layout, booked)

    def round_copy() -> FreeGpus:
        return (FreeGpus(c.nodes, base=book) if from_book
                else FreeGpus(c.nodes, dict(book), layout))

    bulk, single = round_copy(), round_copy()
    released: list[Placement] = []
    for op, flavor, gpus, local in ops:
        if op == "info":
            assert bulk.info(flavor) == single.info(flavor)
        elif op == "release_each" and held:
            some = [held.pop(k % len(held)) for k in range(min(gpus % 4 + 1, len(held)))]
            bulk.release_each(some)
            for p in some:
                single.release(p)
            released += some
        elif op == "retake" and released:
            p = released.pop(gpus % len(released))
            fits = single.can_take(p)
            if fits:
                single.take(p)
            assert bulk.take_if_free(p) is fits
        else:
            a, b = bulk.find(flavor, gpus, local), single.find(flavor, gpus, local)
            assert a == b
            if a is not None:
                bulk.take(a)
                single.take(a)
                held.append(a)
        for f in (_V100_16GB, _K80):
            assert bulk.total_free(f) == single.total_free(f)
    for f in (_V100_16GB, _K80):
        assert bulk.info(f) == single.info(f)
        for g in (1, 2, 3, 4):
            assert bulk.find(f, g, True) == single.find(f, g, True)


def test_a_book_keeps_counts_totals_and_sorted_buckets() -> None:
    c = _mixed_sizes_cluster()
    book = FreeBook(Layout.of(c.nodes))
    ids = book.layout.by_flavor[_V100_16GB]
    book[ids[3]] = 0
    book[ids[1]] = 2
    book[ids[0]] = 2
    assert book.total(_V100_16GB) == sum(book[n] for n in ids)
    assert book.positions(_V100_16GB, 2) == [0, 1]
    assert book.positions(_V100_16GB, 0) == [3]
    assert book.positions(_V100_16GB, 4) == [2]


def test_a_node_off_its_range_keeps_the_round_off_the_book() -> None:
    """A shared gang's second booking briefly takes a node below 0: a round then starts from
    the counts, and the book is back on its buckets once the count is."""
    c = make_cluster().node("k80", gpus=2, count=2).build()
    layout = Layout.of(c.nodes)
    book = FreeBook(layout)
    node = layout.by_flavor[_K80][0]
    book[node] = -1
    assert not book.in_range
    snap = Snapshot(0.0, c, (), free_gpus=book.counts())
    assert FreeGpus.of_snapshot(snap, layout).total_free(_K80) == 1
    book[node] = 2
    assert book.in_range and book.positions(_K80, 2) == [0, 1]


def test_stale_counts_refuse_to_be_read_and_the_round_uses_the_running_gangs() -> None:
    c = make_cluster().node("k80", gpus=2, count=2).build()
    layout = Layout.of(c.nodes)
    book = FreeBook(layout)
    counts = book.counts()
    node = layout.by_flavor[_K80][1]
    book[node] = 0  # the driver books a change after the snapshot was taken
    with pytest.raises(RuntimeError, match="free-GPU counts were taken at book version 0"):
        counts[node]
    running = JobView(make_job("a", gpus=2), JobState.RUNNING, 10.0,
                      Placement.of(resolve_flavor("K80"), ((layout.by_flavor[_K80][0], 2),)))
    snap = Snapshot(0.0, c, (running,), free_gpus=counts)
    free = FreeGpus.of_snapshot(snap, layout)
    assert free.total_free(_K80) == 2 and free.free_on(layout.by_flavor[_K80][0]) == 0


def test_a_spread_gang_is_the_first_look_over_a_book_too() -> None:
    """A gang bigger than any node is the round's first look at its flavor: the nodes it
    takes go to the end of their buckets, over a book as over counts."""
    c = make_cluster().node("v100", gpus=4, count=4).build()
    layout = Layout.of(c.nodes)
    book = FreeBook(layout)
    ids = layout.by_flavor[_V100_16GB]
    book[ids[2]] = 1  # node 2 has one free GPU, the others four
    answers = []
    for free in (FreeGpus(c.nodes, base=book), FreeGpus(c.nodes, dict(book), layout)):
        big = free.find(_V100_16GB, 7, require_locality=False)  # leaves node 1 one GPU
        assert big is not None
        free.take(big)
        answers.append((big, free.find(_V100_16GB, 1, require_locality=True)))
    assert answers[0] == answers[1]
    assert answers[0][1] is not None and answers[0][1].gpus_by_node == ((ids[2], 1),)


@settings(max_examples=80, deadline=None)
@given(booked=st.lists(st.integers(0, 7), min_size=1, max_size=8),
       back=st.lists(st.integers(0, 7), max_size=8, unique=True),
       look_first=st.booleans(),
       ops=st.lists(st.tuples(st.sampled_from(["find", "info", "free_on", "none"]),
                              st.sampled_from([_V100_16GB, _K80]), st.integers(1, 10),
                              st.booleans()), max_size=8))
def test_property_take_back_answers_as_taking_each_if_free(
        booked: list[int], back: list[int], look_first: bool,
        ops: list[tuple[str, str, int, bool]]) -> None:
    """A round-based round over a book: every running gang given back, perhaps a look, the
    staying gangs taken back (noted, applied when next read) -- then whatever the round asks
    is answered as after releasing and taking one at a time (bucket order included)."""
    c = _mixed_sizes_cluster()
    layout = Layout.of(c.nodes)
    book, held = _booked(c, layout, booked)
    bulk, single = FreeGpus(c.nodes, base=book), FreeGpus(c.nodes, dict(book), layout)
    bulk.release_each(held)
    for p in held:
        single.release(p)
    if look_first:
        assert bulk.info(_K80) == single.info(_K80)
    staying = [held[k] for k in back if k < len(held)]
    assert bulk.take_back(staying) == [single.take_if_free(p) for p in staying]
    for op, flavor, gpus, local in ops:
        if op == "info":
            assert bulk.info(flavor) == single.info(flavor)
        elif op == "free_on":
            node = layout.by_flavor[flavor][gpus % len(layout.by_flavor[flavor])]
            assert bulk.free_on(node) == single.free_on(node)
        elif op == "find":
            a, b = bulk.find(flavor, gpus, local), single.find(flavor, gpus, local)
            assert a == b
            if a is not None:
                bulk.take(a)
                single.take(a)
    for f in (_V100_16GB, _K80):
        assert bulk.total_free(f) == single.total_free(f)
        assert bulk.info(f) == single.info(f)
        for g in (1, 2, 3, 4, 8):
            assert bulk.find(f, g, True) == single.find(f, g, True)
            assert bulk.find(f, g, False) == single.find(f, g, False)


def test_take_back_of_a_gang_never_given_back_fails_loudly() -> None:
    c = _mixed_sizes_cluster()
    layout = Layout.of(c.nodes)
    book = FreeBook(layout)
    node = layout.by_flavor[_K80][0]
    book[node] = 0
    free = FreeGpus(c.nodes, base=book)
    assert free.take_back([Placement.of(resolve_flavor("K80"), ((node, 2),))]) == [True]
    with pytest.raises(RuntimeError, match="was not given back"):
        free.total_free(_K80)
