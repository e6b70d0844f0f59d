"""Laying a plan out on GPUs (:mod:`tessera.plan.ranks`) and its step-time bound."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.plan.api import nodes_for, plan_ranked
from tessera.plan.breakdown import COMMUNICATION, COMPUTE, MEMORY, breakdown
from tessera.plan.hybrid import HybridPlan
from tessera.plan.models import gpt
from tessera.plan.ranks import GpuSlot, assign_ranks, slots_of_nodes, slots_of_parts
from tessera.plan.stages import Stage, StageOption

A100 = resolve_flavor("A100-80GB")
V100 = resolve_flavor("V100-16GB")


def _stage(flavor: object, tp: int, replicas: int, first: int, end: int) -> Stage:
    assert flavor in (A100, V100)
    return Stage(flavor, StageOption(tp, replicas, False, 0), first, end, 1,  # type: ignore[arg-type]
                 0.01, 0.001, 0.002, 1.0)


def _plan(stages: tuple[Stage, ...], copies: int, micro: int = 2, n_micro: int = 4
          ) -> HybridPlan:
    return HybridPlan("m", "pipeline", copies * micro * n_micro, copies, micro, n_micro,
                      stages, None, 1.0)


def test_tensor_parallel_groups_stay_on_one_server_and_dp_ranks_cover_the_copies() -> None:
    plan = _plan((_stage(A100, 4, 1, 0, 5), _stage(V100, 2, 2, 5, 8)), copies=2)
    slots = slots_of_parts((("a0", 4, A100), ("v0", 4, V100),
                            ("a1", 4, A100), ("v1", 4, V100)))
    roles = assign_ranks(plan, slots, 8)
    assert len(roles) == 16
    by_stage: dict[int, list[object]] = {}
    for r in roles:
        by_stage.setdefault(r.stage, []).append(r)
    assert sorted(by_stage) == [0, 1]
    for r in roles:
        group = [q for q in roles if q.stage == r.stage and q.dp_rank == r.dp_rank]
        assert len({q.device.split(":")[0] for q in group}) == 1     # one server per TP group
        assert sorted(q.tp_rank for q in group) == list(range(r.tp_size))
    assert sorted({(r.dp_rank, r.dp_size) for r in roles if r.stage == 1}) == [
        (0, 4), (1, 4), (2, 4), (3, 4)]
    assert {r.local_batch for r in roles if r.stage == 0} == {8}       # 2 x 4 per copy
    assert {r.local_batch for r in roles if r.stage == 1} == {4}       # shared by 2 replicas
    assert {(r.first_layer, r.end_layer) for r in roles if r.stage == 1} == {(5, 8)}


def test_a_devices_role_does_not_depend_on_the_order_it_was_listed_in() -> None:
    plan = _plan((_stage(A100, 2, 1, 0, 5), _stage(V100, 1, 2, 5, 8)), copies=2)
    parts = (("a0", 2, A100), ("a1", 2, A100), ("v0", 4, V100))
    one = {r.device: r.env() for r in assign_ranks(plan, slots_of_parts(parts), 8)}
    two = {r.device: r.env() for r in assign_ranks(plan, slots_of_parts(parts[::-1]), 8)}
    assert one == two


def test_a_group_that_fits_no_server_is_refused_with_the_free_gpus() -> None:
    plan = _plan((_stage(A100, 4, 1, 0, 8),), copies=1)
    slots = slots_of_parts((("a0", 2, A100), ("a1", 2, A100)))
    with pytest.raises(SpecError, match=r"group of 4 x A100-80GB on one server; free "
                                        r"A100-80GB GPUs per server: a0: 2, a1: 2"):
        assign_ranks(plan, slots, 8)


def test_unused_gpus_are_idle_with_stage_minus_one() -> None:
    plan = _plan((_stage(A100, 1, 2, 0, 8),), copies=1)
    roles = assign_ranks(plan, [GpuSlot("a0", A100, i) for i in range(3)], 8)
    assert [r.stage for r in roles] == [0, 0, -1]
    assert roles[2].env()["TESSERA_LOCAL_BATCH"] == "0"
    assert roles[0].env()["TESSERA_LAYERS"] == "0:8"


def test_a_data_parallel_plan_keeps_the_planners_local_batches() -> None:
    model = gpt(4, 512, 8, 128)
    counts = {A100: 2, V100: 2}
    ranked = plan_ranked(model, counts, 64, gpus_per_node=2)
    assert ranked.plan.kind == "data-parallel"
    roles = ranked.ranks
    assert sum(r.local_batch for r in roles) == 64
    assert {r.dp_size for r in roles if r.stage == 0} == {len(ranked.plan.dp.shares)}  # type: ignore[union-attr]
    assert ranked.breakdown.bound in (COMPUTE, COMMUNICATION)
    out = ranked.to_json()
    assert [d["device"] for d in out["devices"]] == [s.device for s in
                                                     slots_of_nodes(nodes_for(counts, 2))]


def test_the_json_names_every_stages_devices_and_the_bound() -> None:
    model = gpt(8, 2048, 16, 1024)
    ranked = plan_ranked(model, {A100: 2, V100: 4}, 8, gpus_per_node=4, max_layers=8)
    out = ranked.to_json()
    assert out["bound"] in (COMPUTE, MEMORY, COMMUNICATION)
    assert out["compute_s"] + out["communication_s"] == pytest.approx(out["step_time_s"])
    used = [d for st in out["stages"] for d in st["devices"]]
    assert len(used) == len(set(used))
    for st in out["stages"]:
        assert len(st["devices"]) == st["gpus"] * out["dp_copies"]
    assert len(out["ranks"]) == 6
    assert "bound:" in ranked.describe()


def test_a_tiny_micro_batch_on_a_wide_stage_is_memory_bound() -> None:
    model = gpt(4, 4096, 32, 16)          # short sequences: weights dominate the traffic
    plan = HybridPlan("m", "pipeline", 1, 1, 1, 1, (
        Stage(V100, StageOption(1, 1, False, 0), 0, 4, 1, 0.002, 0.0, 0.0, 1.0),), None, 0.01)
    from tessera.plan.api import default_cost_model

    b = breakdown(plan, model, default_cost_model(), 0.002)
    assert b.bound == MEMORY
    assert "optimistic" in b.describe()
