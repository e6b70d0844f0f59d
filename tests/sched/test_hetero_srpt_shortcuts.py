"""hetero_srpt's shortcuts give what the long path gives.

A round of ``hetero_srpt`` skips work when it cannot change the answer:

* the matching LP and ``_finalize`` when every selected job took its cheapest flavor;
* in the core's :func:`~tessera.sched.core.preview.preview` that ``_plan`` asks, taking the
  kept jobs one by one when their GPUs fit their nodes (the replay starts from the counts less
  their GPUs), and the whole replay when, besides, no gang of more than one GPU is new to its
  flavor.

Whole busy runs check both at every decision against the long path; a unit case checks which
jobs the preview's ``_kept`` counts as kept.
"""

from __future__ import annotations

from typing import Any

import pytest

from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobState
from tessera.sched.core import preview as preview_module
from tessera.sched.core.lp import LpSolver
from tessera.sched.core.snapshot import Placement
from tessera.sched.policies.hetero_srpt import HeteroSrpt
from tessera.sim.config import FailureConfig, SimConfig
from tests.builders import busy_simulator, make_job, view

_V100, _K80 = resolve_flavor("v100"), resolve_flavor("k80")


@pytest.mark.parametrize("policy", ["hetero_srpt", "hetero_gittins"])
def test_the_shortcuts_answer_as_the_long_path_at_every_decision(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    select, plan, kept = HeteroSrpt._select, HeteroSrpt._plan, preview_module._kept
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
        # the long path: every kept job taken one by one (forced by a node that is not up)
        with monkeypatch.context() as m:
            m.setattr(preview_module, "_kept",
                      lambda sel: ({**kept(sel)[0], "nowhere": 1}, kept(sel)[1]))
            full = plan(self, snap, selected, ctx)
        assert got == full
        firsts = [(j, order[0]) for j, _cost, order in selected]
        gang = any(j.spec.num_gpus > 1 for j, _fl in kept(firsts)[1])
        seen["replayed" if gang else "skipped"] += 1
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


def _kept(name: str, gpus: int, node: str, flavor: GpuFlavor = _V100) -> tuple[Any, Any, Any]:
    p = Placement.of(flavor, ((node, gpus),))
    return (view(make_job(name, gpus), JobState.RUNNING, p), {}, [flavor])


def _new(name: str, gpus: int, flavor: GpuFlavor = _V100) -> tuple[Any, Any, Any]:
    return (view(make_job(name, gpus)), {}, [flavor])


def test_kept_jobs_are_those_running_on_the_flavor_they_were_selected_for() -> None:
    moved = _kept("m", 2, "n1")
    stopped = (view(make_job("s", 2), JobState.PENDING, Placement.of(_V100, (("n1", 2),))), {},
               [_V100])
    selected = [_kept("a", 2, "n0"), _new("c", 1), _kept("b", 3, "n0"),
                (moved[0], {}, [_K80, _V100]), stopped, _kept("d", 1, "n2")]
    used, new = preview_module._kept([(j, order[0]) for j, _cost, order in selected])
    assert used == {"n0": 5, "n2": 1}
    assert [(j.job_id, fl) for j, fl in new] == [("c", _V100), ("m", _K80), ("s", _V100)]
