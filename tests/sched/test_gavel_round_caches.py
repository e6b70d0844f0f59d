"""What Gavel's round mechanism keeps between rounds answers as if built anew.

A round of ``max_min_fairness`` (and the other LP policies) keeps, until the inputs change:
the jobs' rows gathered from the last reallocation (keyed by the jobs' specs, in order, the
reallocation's rows and the round's flavor order), the fastest-first flavor order (keyed by
the up flavors) and the shares' notes (keyed by the shares). Each case below changes one
input of a key and compares with a fresh build, so a key that misses an input fails here.
Whole runs are checked in ``tests/sim/test_policy_memory.py``.
"""

from __future__ import annotations

import dataclasses
import random
from types import MappingProxyType

import numpy as np

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import PolicyCaches
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import PolicyContext
from tessera.sched.gavel import RoundState, Shares
from tessera.sched.gavel.lp_rows import Gathered as _Gathered
from tessera.sched.gavel.lp_rows import ShareRows as _Rows
from tests.builders import make_cluster, make_job, snapshot, view

_K80 = resolve_flavor("K80")
_V100_16GB = resolve_flavor("V100-16GB")

A3C = "A3C"  # runs on both flavors with 1 GPU, on neither with 4 (not profiled)
CLUSTER = make_cluster().node("v100", gpus=4, count=1).node("k80", gpus=4, count=1).build()
FLAVORS = (_V100_16GB, _K80)


def _same(got: _Gathered, want: _Gathered) -> None:
    assert got.ids == want.ids and got.perm == want.perm
    for name in ("x", "usable", "at_reset"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    assert len(got.lists) == len(want.lists)
    for (listed, share), (w_listed, w_share) in zip(got.lists, want.lists, strict=True):
        np.testing.assert_array_equal(listed, w_listed)
        np.testing.assert_array_equal(share, w_share)


def test_gathered_rows_follow_every_input_of_their_key() -> None:
    oracle = ThroughputOracle(default_throughputs(), CLUSTER)
    a, b, c = (make_job(n, 1, job_type=A3C) for n in "abc")
    b4 = dataclasses.replace(b, num_gpus=4)
    shares = Shares((a.job_id, b.job_id), FLAVORS, np.array([[0.2, 0.8], [0.6, 0.4]]))
    state = RoundState(shares, 0.0, MappingProxyType({a.job_id: ((_K80, 5.0),)}),
                       frozenset({a.job_id, b.job_id}))
    kept = _Rows.of(state, oracle, FLAVORS, None)
    cases = [([a, b], [0, 1]), ([a, b], [1, 0]), ([b, a], [1, 0]), ([a, b4], [1, 0]),
             ([a, c], [1, 0]), ([a], [1, 0]), ([a, b], [0, 1])]
    for specs, perm in cases:
        fresh = _Rows.of(state, oracle, FLAVORS, None).gather(list(specs), list(perm), oracle)
        _same(kept.gather(list(specs), list(perm), oracle), fresh)
    # (the cases discriminate: a new kind for the same job id can use no flavor)
    assert kept.gather([a, b4], [0, 1], oracle).usable[1].tolist() == [False, False]
    assert kept.gather([a, b], [0, 1], oracle).usable[1].tolist() == [True, True]


def test_the_flavor_order_follows_the_up_flavors() -> None:
    policy = make_policy("max_min_fairness")
    rng = random.Random(0)
    oracle = ThroughputOracle(default_throughputs(), CLUSTER)
    orders = []
    caches = PolicyCaches()  # the driver's: the order is kept between rounds
    for down in ((), ("v100-16gb-0000",), ()):
        snap = snapshot(CLUSTER, down_nodes=frozenset(down))
        ctx = PolicyContext(snap, oracle, rng, caches=caches)
        orders.append(list(policy._flavor_order(ctx)))  # type: ignore[attr-defined]
    assert orders == [[_V100_16GB, _K80], [_K80], [_V100_16GB, _K80]]


def test_the_notes_follow_the_shares() -> None:
    policy = make_policy("max_min_fairness")
    oracle = ThroughputOracle(default_throughputs(), CLUSTER)
    a = make_job("a", 1, job_type=A3C)
    notes = []
    caches = PolicyCaches()  # the driver's: the notes are kept between rounds
    for x in ([[0.25, 0.75]], [[1.0, 0.0]]):
        shares = Shares((JobId("a"),), FLAVORS, np.array(x))
        state = RoundState(shares, 0.0, MappingProxyType({}), frozenset({a.job_id}))
        snap = snapshot(CLUSTER, view(a), policy_state=state)
        ctx = PolicyContext(snap, oracle, random.Random(0), caches=caches)
        notes.append(dict(policy.rank(ctx).notes))
    assert notes == [{"a": "target share V100-16GB 0.25, K80 0.75"},
                     {"a": "target share V100-16GB 1.00"}]
