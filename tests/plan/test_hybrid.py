"""The hybrid (data × pipeline) search and the layer-wise model descriptions."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.errors import NoProfileError, SpecError
from tessera.perf.steptime import CostModel
from tessera.plan.api import parse_devices
from tessera.plan.exhaustive import exhaustive_hybrid_step_s
from tessera.plan.hybrid import plan_hybrid
from tessera.plan.models import LayeredModel, bert_large, gpt, layered_model, resnet50
from tessera.plan.pipeline import PipelineConfig


@pytest.fixture(scope="module")
def cm() -> CostModel:
    return CostModel()


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


SMALL = PipelineConfig(1, 1, zero_levels=(0,), max_tp=1)
HYBRID_CASES = [
    ("gpt-2x1024", "A100-40GB:2,T4:1", 8),
    ("gpt-2x2048", "V100:2,T4:1", 4),
    ("gpt-1x1024", "A100-40GB:1,V100:1,RTX-2080Ti:1", 4),
]


@pytest.mark.parametrize(("name", "devices", "batch"), HYBRID_CASES,
                         ids=["gpt2-a100-t4", "gpt2-v100-t4", "gpt1-three"])
def test_hybrid_equals_exhaustive(cm: CostModel, name: str, devices: str, batch: int) -> None:
    model, counts = layered_model(name), parse_devices(devices)
    plan = plan_hybrid(model, counts, batch, cost_model=cm, base=SMALL)
    best = exhaustive_hybrid_step_s(model, counts, batch, cm, base=SMALL)
    assert plan.step_time_s == pytest.approx(best, rel=1e-9)
    assert plan.throughput_samples_per_s == pytest.approx(batch / plan.step_time_s)


@st.composite
def hybrid_cases(draw: st.DrawFn) -> tuple[str, str, int]:
    hidden = draw(st.sampled_from([1024, 2048]))
    flavors = draw(st.lists(st.sampled_from(["A100-40GB", "V100", "T4", "RTX-2080Ti"]),
                            min_size=1, max_size=3, unique=True))
    devices = ",".join(f"{f}:{draw(st.integers(1, 2))}" for f in flavors)
    return f"gpt-{draw(st.integers(1, 2))}x{hidden}", devices, draw(st.sampled_from([2, 4, 8]))


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(hybrid_cases())
def test_hybrid_equals_exhaustive_on_random_cases(case: tuple[str, str, int]) -> None:
    """The lazily bounded walk over (copies × micro-batch) settings, each bound tightened and
    each flavor order cut against the incumbent, still returns the whole space's optimum."""
    name, devices, batch = case
    cm = CostModel()
    model, counts = layered_model(name), parse_devices(devices)
    best = exhaustive_hybrid_step_s(model, counts, batch, cm, base=SMALL)
    try:
        got = plan_hybrid(model, counts, batch, cost_model=cm, base=SMALL).step_time_s
    except SpecError:
        got = math.inf
    assert got == pytest.approx(best, rel=1e-9) or got == best == math.inf


def test_small_model_prefers_data_parallel(cm: CostModel) -> None:
    plan = plan_hybrid(resnet50(), parse_devices("A100:2,V100:4,T4:2"), 256, cost_model=cm)
    assert plan.kind == "data-parallel" and plan.dp is not None
    assert sum(s.local_bsz for s in plan.dp.shares) == 256


def test_big_model_gets_a_pipeline_and_json_has_degrees(cm: CostModel) -> None:
    plan = plan_hybrid(gpt(), parse_devices("A100-40GB:4,V100:8"), 64, cost_model=cm)
    assert plan.kind == "pipeline" and plan.stages
    js = plan.to_json()
    assert js["step_time_s"] == plan.step_time_s and js["pp_stages"] == len(plan.stages)
    for s in js["stages"]:
        assert s["gpus"] == s["tp"] * s["replicas"]
        assert s["mem_gib_per_gpu"] > 0


def test_idle_devices_are_dropped_with_a_reason(cm: CostModel) -> None:
    plan = plan_hybrid(layered_model("gpt-8x4096"), parse_devices("A100:1,V100:2,T4:2"), 4,
                       cost_model=cm, base=SMALL)
    assert [(d.flavor.short, d.count) for d in plan.dropped] == [("T4", 2)]
    assert "no faster" in plan.dropped[0].reason


def test_dropped_data_parallel_gpus_on_several_servers_are_counted_per_server(
        cm: CostModel) -> None:
    """Four T4s on two 2-GPU servers: the reason counts each server's two, not "all 2" of 4."""
    plan = plan_hybrid(layered_model("resnet50"), parse_devices("H100:4,T4:4"), 64,
                       cost_model=cm, gpus_per_node=2)
    assert plan.kind == "data-parallel"
    t4 = next(d for d in plan.dropped if d.flavor.short == "T4")
    assert t4.count == 4
    assert t4.reason.startswith("2 on t4-0000: using all 2 would make a step ")
    assert "; 2 on t4-0001: using all 2 would make a step " in t4.reason
    h100 = next(d for d in plan.dropped if d.flavor.short == "H100-80GB")
    assert h100.count == 2 and h100.reason.startswith("on h100-80gb-0000: using all 2 ")


def test_hybrid_bad_input(cm: CostModel) -> None:
    with pytest.raises(SpecError, match="positive"):
        plan_hybrid(gpt(), parse_devices("V100:2"), 0, cost_model=cm)
    with pytest.raises(SpecError, match=r"does not fit.*short by"):
        plan_hybrid(gpt(48, 6144, 48, 2048), parse_devices("T4:2"), 8, cost_model=cm)


@pytest.mark.parametrize(("name", "fewer", "more", "batch"),
                         [("gpt-12x4096", "V100:4", "V100:4,T4:2", 4),
                          ("gpt-2x2048", "A100-40GB:1,T4:1", "A100-40GB:1,T4:2", 8),
                          ("gpt-2x1024", "V100:1", "V100:1,RTX-2080Ti:1", 4)],
                         ids=["issue-v100-t4", "one-more-t4", "new-flavor"])
def test_hybrid_more_devices_never_slower(cm: CostModel, name: str, fewer: str, more: str,
                                          batch: int) -> None:
    model = layered_model(name)
    a = plan_hybrid(model, parse_devices(fewer), batch, cost_model=cm, base=SMALL)
    b = plan_hybrid(model, parse_devices(more), batch, cost_model=cm, base=SMALL)
    assert b.step_time_s <= a.step_time_s * (1 + 1e-12)
