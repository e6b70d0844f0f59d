"""Layer-wise models, the heterogeneous pipeline DP and the hybrid search."""

from __future__ import annotations

import math

import pytest

from tessera.errors import NoProfileError, SpecError
from tessera.model.cluster import Link, LinkKind
from tessera.model.gpus import resolve_flavor
from tessera.perf.memory import MemoryBudget
from tessera.perf.steptime import CostModel
from tessera.plan.api import parse_devices
from tessera.plan.exhaustive import (
    best_pipeline_bottleneck,
    best_pipeline_step_s,
    exhaustive_hybrid_step_s,
)
from tessera.plan.hybrid import plan_hybrid
from tessera.plan.models import LayeredModel, bert_large, gpt, layered_model, resnet50
from tessera.plan.pipeline import (
    FlavorGroup,
    PipelineConfig,
    StageCosts,
    plan_pipeline,
    replica_choices,
)


@pytest.fixture(scope="module")
def cm() -> CostModel:
    return CostModel()


def group(cm: CostModel, flavor: str, n: int, mem_gib: float | None = None) -> FlavorGroup:
    f = resolve_flavor(flavor)
    return FlavorGroup(f, n, cm.achieved_flops_per_s(f), MemoryBudget(mem_gib or f.mem_gib),
                       Link.of(LinkKind.NVLINK, 150.0), Link.of(LinkKind.INFINIBAND), 8)


# --- model descriptions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "params", "tol"),
    [(resnet50(), 25.6e6, 0.01), (bert_large(), 335e6, 0.01), (gpt(), 1.558e9, 0.01)],
    ids=["resnet50", "bert-large", "gpt2-xl"],
)
def test_generated_models_match_published_sizes(model: LayeredModel, params: float,
                                                tol: float) -> None:
    assert model.params == pytest.approx(params, rel=tol)


def test_resnet50_forward_is_4_1_gmac() -> None:
    assert sum(x.fwd_flops for x in resnet50().layers) / 2 == pytest.approx(4.1e9, rel=0.01)


@pytest.mark.parametrize(
    ("name", "layers"),
    [("gpt", 50), ("gpt-98x2048", 100), ("bert-large", 26), ("resnet50", 18)],
    ids=["gpt", "gpt-custom", "bert-large", "resnet50"],
)
def test_layered_model_lookup(name: str, layers: int) -> None:
    assert layered_model(name).n_layers == layers


@pytest.mark.parametrize("name", ["alexnet", "gpt-0x1024", "gpt-4x100"],
                         ids=["unknown", "no-layers", "odd-hidden"])
def test_layered_model_lookup_errors(name: str) -> None:
    with pytest.raises(NoProfileError):
        layered_model(name)


# --- pipeline DP vs exhaustive enumeration --------------------------------------------------------

SMALL_CASES = [
    (gpt(4, 1024, 16, 512), [("A100-40GB", 2), ("T4", 2)], PipelineConfig(2, 8)),
    (gpt(5, 2048, 16, 1024), [("V100", 3), ("T4", 1)], PipelineConfig(1, 4)),
    (gpt(4, 1024, 16, 512), [("A100-40GB", 1), ("V100", 1), ("T4", 2)],
     PipelineConfig(1, 16, dp_copies=2)),
    (gpt(5, 1024, 16, 1024), [("V100", 2), ("RTX-2080Ti", 2)],
     PipelineConfig(4, 4, recompute=True)),
    (gpt(6, 4096, 32, 2048), [("V100", 3), ("T4", 2)], PipelineConfig(1, 8)),
]


@pytest.mark.parametrize(
    ("model", "devices", "config"), SMALL_CASES,
    ids=["gpt4-a100-t4", "gpt5-v100-t4", "three-flavors-two-copies", "gpt5-recompute",
         "memory-bound-gpt6"],
)
def test_pipeline_dp_equals_exhaustive(cm: CostModel, model: LayeredModel,
                                       devices: list[tuple[str, int]],
                                       config: PipelineConfig) -> None:
    groups = [group(cm, f, n) for f, n in devices]
    sc = StageCosts(model, groups, config)
    exhaustive = best_pipeline_bottleneck(sc)
    if not math.isfinite(exhaustive):
        with pytest.raises(SpecError):
            plan_pipeline(model, groups, config)
        return
    plan = plan_pipeline(model, groups, config)
    assert plan.best_bottleneck_s == pytest.approx(exhaustive, rel=1e-9)
    # the stages returned realise their bottleneck, cover the layers, respect memory and counts
    assert max(s.time_s + s.allreduce_s / config.n_micro for s in plan.stages) == pytest.approx(
        plan.bottleneck_s)
    assert plan.bottleneck_s >= plan.best_bottleneck_s * (1 - 1e-12)
    assert plan.stages[0].first_layer == 0
    assert all(a.end_layer == b.first_layer for a, b in zip(plan.stages, plan.stages[1:],
                                                           strict=False))
    assert plan.stages[-1].end_layer == model.n_layers
    for g in groups:
        used = sum(s.replicas for s in plan.stages if s.flavor == g.flavor)
        assert used <= g.count
        assert all(s.mem_gib * 2**30 <= g.budget.usable_bytes
                   for s in plan.stages if s.flavor == g.flavor)
    # the full step time of the DP's plan is close to the best step time of any plan
    assert plan.step_time_s <= best_pipeline_step_s(sc) * 1.05


def test_memory_forces_more_stages(cm: CostModel) -> None:
    model = gpt(8, 2048, 16, 1024)
    roomy = plan_pipeline(model, [group(cm, "V100", 4, mem_gib=80)], PipelineConfig(1, 4))
    tight = plan_pipeline(model, [group(cm, "V100", 4, mem_gib=8)], PipelineConfig(1, 4))
    assert max(s.mem_gib for s in tight.stages) <= 8
    assert len(tight.stages) >= len(roomy.stages)


def test_model_too_big_for_devices_is_a_clear_error(cm: CostModel) -> None:
    with pytest.raises(SpecError, match="does not fit"):
        plan_pipeline(gpt(48, 6144, 48, 2048), [group(cm, "T4", 2)], PipelineConfig(1, 4))


def test_replica_choices() -> None:
    assert replica_choices(3) == (1, 2, 3)
    assert replica_choices(12) == (1, 2, 4, 8, 12)
    assert replica_choices(16) == (1, 2, 4, 8, 16)


# --- hybrid ---------------------------------------------------------------------------------------

HYBRID_CASES = [
    ("gpt-4x1024", "A100-40GB:2,T4:2", 16),
    ("gpt-6x2048", "V100:2,T4:2", 8),
    ("resnet50", "V100:2,T4:1", 32),
    ("gpt-4x1024", "A100-40GB:1,V100:1,RTX-2080Ti:2", 8),
]


@pytest.mark.parametrize(("name", "devices", "batch"), HYBRID_CASES,
                         ids=["gpt4-a100-t4", "gpt6-v100-t4", "resnet50-dp", "gpt4-three"])
def test_hybrid_within_five_percent_of_exhaustive(cm: CostModel, name: str, devices: str,
                                                  batch: int) -> None:
    model, counts = layered_model(name), parse_devices(devices)
    plan = plan_hybrid(model, counts, batch, cost_model=cm)
    best = exhaustive_hybrid_step_s(model, counts, batch, cm)
    assert best <= plan.step_time_s + 1e-12
    assert plan.step_time_s <= best * 1.05
    assert plan.throughput_samples_per_s == pytest.approx(batch / plan.step_time_s)


def test_small_model_prefers_data_parallel(cm: CostModel) -> None:
    plan = plan_hybrid(resnet50(), parse_devices("A100:2,V100:4,T4:2"), 256, cost_model=cm)
    assert plan.kind == "data-parallel" and plan.dp is not None
    assert sum(s.local_bsz for s in plan.dp.shares) == 256


def test_big_model_gets_a_pipeline(cm: CostModel) -> None:
    plan = plan_hybrid(gpt(), parse_devices("A100-40GB:4,V100:8"), 64, cost_model=cm)
    assert plan.kind == "pipeline" and len(plan.stages) >= 2
    js = plan.to_json()
    assert js["stages"] and js["step_time_s"] == plan.step_time_s


def test_hybrid_bad_input(cm: CostModel) -> None:
    with pytest.raises(SpecError, match="positive"):
        plan_hybrid(gpt(), parse_devices("V100:2"), 0, cost_model=cm)
    with pytest.raises(SpecError, match="does not fit"):
        plan_hybrid(gpt(48, 6144, 48, 2048), parse_devices("T4:2"), 8, cost_model=cm)


@pytest.mark.slow
def test_sixty_four_devices_hundred_layers_plan(cm: CostModel) -> None:
    """The plan covers all 100 layers (the seconds target is in benchmarks/bench_plan.py)."""
    groups = [group(cm, f, 16) for f in ("A100-40GB", "V100", "T4", "RTX-2080Ti")]
    plan = plan_pipeline(gpt(98, 4096, 32, 2048), groups, PipelineConfig(1, 64, recompute=True))
    assert plan.stages[-1].end_layer == 100
