"""The core's preview: where a round would put a selection, and whether a gang would split."""

from __future__ import annotations

import inspect
import random

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.free_view import Layout
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.preview import preview
from tessera.sched.core.snapshot import JobView, Placement
from tessera.sched.policies import hetero_srpt
from tests.builders import make_cluster, make_job, snapshot, view

V100 = resolve_flavor("V100-16GB")


def _scattered() -> tuple[object, list[JobView], JobView]:
    """Two 4-GPU V100 nodes, two long 1-GPU jobs on each: 4 GPUs free, split 2 + 2."""
    c = make_cluster().node("v100", gpus=4, count=2).build()
    small = [view(make_job(f"s{i}", steps=1e8), JobState.RUNNING,
                  Placement.of(V100, ((f"v100-16gb-{i % 2:04d}", 1),))) for i in range(4)]
    return c, small, view(make_job("g", gpus=4, steps=1e4))


def test_the_preview_says_a_gang_would_split_and_places_it_as_the_core_does() -> None:
    c, small, gang = _scattered()
    nodes = c.nodes  # type: ignore[attr-defined]
    pv = preview(nodes, Layout.of(nodes), [(j, V100) for j in [*small, gang]])
    assert pv is not None
    assert [(j.job_id, fl) for j, fl in pv.new] == [("g", V100)]
    assert pv.would_split(gang, V100)
    assert sorted(pv.occupants) == ["v100-16gb-0000", "v100-16gb-0001"]
    where = pv.place(gang, V100)
    # what decide() gives the gang with a policy that does not care (srtf): the same GPUs
    core = decide(snapshot(c, *small, gang, round_s=360.0), make_policy("srtf"),
                  DecisionContext(ThroughputOracle(default_throughputs(), c), random.Random(0)))
    assert where == core.placements["g"] and not where.consolidated
    assert pv.free_on("v100-16gb-0000") == pv.free_on("v100-16gb-0001") == 0


def test_a_freed_node_holds_the_gang_and_nothing_can_split_without_gangs() -> None:
    c, small, gang = _scattered()
    nodes = c.nodes  # type: ignore[attr-defined]
    pv = preview(nodes, Layout.of(nodes), [(j, V100) for j in [*small, gang]])
    assert pv is not None
    for j in pv.occupants["v100-16gb-0001"]:
        assert j.placement is not None
        pv.release(j.placement)
    assert not pv.would_split(gang, V100)
    assert pv.on_one_node(gang, V100) == Placement.of(V100, (("v100-16gb-0001", 4),))
    # only 1-GPU jobs new, kept jobs where they run: no gang can split, no replay at all
    one = view(make_job("one"))
    assert preview(nodes, Layout.of(nodes), [(j, V100) for j in [*small, one]]) is None


def test_hetero_srpt_asks_the_core_instead_of_replaying_its_placement() -> None:
    """The policy builds no free-GPU book of its own: where gangs go is preview()'s answer."""
    source = inspect.getsource(hetero_srpt)
    assert "preview(" in source
    assert "FreeGpus(" not in source and "find(" not in source
