"""hetero_srpt's shortcuts give what the long path gives.

A round of ``hetero_srpt`` skips work when it cannot change the answer:

* the matching LP and ``_finalize`` when every selected job took its cheapest flavor;
* the placement replay of ``_plan`` when no gang of more than one GPU is new to its flavor
  and the kept jobs' GPUs fit their nodes (``_may_clear``).

Whole busy runs check both at every decision against the long path; unit cases check that
``_may_clear`` looks at every input that can make the replay clear a node.
"""

from __future__ import annotations

from typing import Any

import pytest

from tessera.model.jobs import JobState
from tessera.sched.lp import LpSolver
from tessera.sched.policies.hetero_srpt import HeteroSrpt
from tessera.sched.snapshot import Placement
from tessera.sim.config import FailureConfig, SimConfig
from tests.builders import busy_simulator, make_job, view


@pytest.mark.parametrize("policy", ["hetero_srpt", "hetero_gittins"])
def test_the_shortcuts_answer_as_the_long_path_at_every_decision(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    select, plan = HeteroSrpt._select, HeteroSrpt._plan
    seen = {"first": 0, "skipped": 0, "replayed": 0, "cleared": 0}

    def checked_select(ranked: Any, cap: dict[str, int]) -> Any:
        selected, rest, first = select(ranked, cap)
        if first and selected:
            seen["first"] += 1
            assert HeteroSrpt._match(list(selected), cap, LpSolver()) == (selected, ())
            assert HeteroSrpt._finalize(list(selected), cap) == selected
        return selected, rest, first

    def checked_plan(self: HeteroSrpt, snap: Any, selected: Any, ctx: Any) -> set[str]:
        got = plan(self, snap, selected, ctx)
        with monkeypatch.context() as m:
            m.setattr(HeteroSrpt, "_may_clear", staticmethod(lambda *a: True))
            full = plan(self, snap, selected, ctx)
        assert got == full
        may = HeteroSrpt._may_clear(selected, self._nodes_of(snap).placement.capacity)
        seen["replayed" if may else "skipped"] += 1
        seen["cleared"] += bool(got)
        return got

    monkeypatch.setattr(HeteroSrpt, "_select", staticmethod(checked_select))
    monkeypatch.setattr(HeteroSrpt, "_plan", checked_plan)
    failures = FailureConfig(job_failure_rate=0.5, retry_delay_s=30.0)
    for k80_nodes in (1, 2, 3, 5):
        for cfg in (SimConfig(), SimConfig(failures=failures)):
            busy_simulator(policy, cfg, k80_nodes=k80_nodes).run()
    assert seen["first"] > 10 and seen["skipped"] > 10 and seen["replayed"] > 10
    assert seen["cleared"] > 0


_CAP = {"n0": 4, "n1": 4}


def _kept(name: str, gpus: int, node: str, flavor: str = "v100") -> tuple[Any, Any, Any]:
    p = Placement(flavor, ((node, gpus),))
    return (view(make_job(name, gpus), JobState.RUNNING, p), {}, [flavor])


def _new(name: str, gpus: int, flavor: str = "v100") -> tuple[Any, Any, Any]:
    return (view(make_job(name, gpus)), {}, [flavor])


def test_may_clear_is_false_only_when_nothing_can_be_cleared() -> None:
    assert not HeteroSrpt._may_clear([_kept("a", 2, "n0"), _kept("b", 2, "n0"),
                                      _new("c", 1)], _CAP)
    # a new gang of two GPUs
    assert HeteroSrpt._may_clear([_kept("a", 2, "n0"), _new("c", 2)], _CAP)
    # a running gang selected for another flavor is new there
    moved = _kept("m", 2, "n1")
    assert HeteroSrpt._may_clear([_kept("a", 2, "n0"), (moved[0], {}, ["k80", "v100"])], _CAP)
    # a running gang that is not RUNNING any more (stopped) is new
    stopped = (view(make_job("s", 2), JobState.PENDING, Placement("v100", (("n1", 2),))), {},
               ["v100"])
    assert HeteroSrpt._may_clear([stopped], _CAP)
    # kept jobs that overfill a node: one of them would fail to take its place
    assert HeteroSrpt._may_clear([_kept("a", 3, "n0"), _kept("b", 2, "n0")], _CAP)
    # a kept job on a node that is not up
    assert HeteroSrpt._may_clear([_kept("a", 1, "n9")], _CAP)
