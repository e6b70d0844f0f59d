"""Profiles, segment options, the planner and its bounds, on ParvaGPU's A100-80GB data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tessera.errors import NoProfileError, SpecError
from tessera.share.mig import is_legal, mig_gpu
from tessera.share.packing import lp_lower_bound, patterns, plan_heuristic, plan_ilp, plan_services
from tessera.share.profiles import (
    PARVAGPU_RULE,
    BatchingRule,
    Service,
    load_parvagpu_profiles,
    parvagpu_scenario,
)
from tessera.share.segments import SloUnreachableError, cheapest_cover, service_options

A100 = mig_gpu("A100-80GB")
TABLE = load_parvagpu_profiles()


def test_profile_semantics_and_interpolation() -> None:
    c = TABLE.curve("resnet50", "1g", 2)
    p = TABLE.point("resnet50", "1g", 1, 2)
    assert p.latency_ms == pytest.approx(8.0)
    assert p.throughput_rps == pytest.approx(2 * 125.968)  # per-process x processes
    lo, hi = c.at(4), c.at(8)
    mid = c.at(6)
    assert lo.latency_ms < mid.latency_ms < hi.latency_ms
    assert mid.latency_ms == pytest.approx((lo.latency_ms + hi.latency_ms) / 2)


@pytest.mark.parametrize(
    ("model", "kind", "batch", "procs"),
    [("resnet50", "1g", 512, 1), ("resnet50", "5g", 1, 1), ("vgg19", "1g", 16, 3)],
    ids=["batch-out-of-range", "unknown-kind", "out-of-memory"],
)
def test_profile_lookup_errors(model: str, kind: str, batch: int, procs: int) -> None:
    with pytest.raises(NoProfileError):
        TABLE.point(model, kind, batch, procs)


def test_unknown_model_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="no profile for model 'gpt5'"):
        TABLE.curves_of("gpt5")


def test_unreachable_slo_reports_best_latency() -> None:
    svc = Service("tight", "vgg19", 100.0, 2.0)
    with pytest.raises(SloUnreachableError, match=r"best latency reachable is \d+\.\d+ ms"):
        service_options(svc, TABLE, A100, BatchingRule())


def test_batching_rule_limits_latency() -> None:
    svc = Service("r", "resnet50", 500.0, 40.0)
    for frac in (0.3, 0.5):
        opts = service_options(svc, TABLE, A100, BatchingRule(latency_fraction=frac))
        assert all(o.latency_ms <= frac * 40.0 for o in opts.options)
        assert all(o.procs <= 3 for o in opts.options)


@pytest.mark.parametrize("rate", [10.0, 333.0, 2000.0, 9000.0], ids=["tiny", "small", "mid", "big"])
def test_cheapest_cover_meets_rate_with_min_slices(rate: float) -> None:
    opts = service_options(Service("s", "resnet50", rate, 100.0), TABLE, A100, BatchingRule())
    segs = cheapest_cover(opts)
    assert sum(s.throughput_rps for s in segs) >= opts.required_rps
    best = max(o.rps_per_compute_slice for o in opts.options)
    assert sum(s.compute_slices for s in segs) >= opts.required_rps / best


@pytest.mark.parametrize(
    ("scenario", "optimum", "lp_bound"),
    [(1, 2, 1), (2, 3, 2), (3, 5, 4), (4, 7, 6), (5, 12, 12), (6, 16, 15)],
    ids=[f"scenario-{i}" for i in range(1, 7)],
)
def test_parvagpu_scenarios_reach_reference_optimum(
    scenario: int, optimum: int, lp_bound: int
) -> None:
    svcs = parvagpu_scenario(scenario)
    plan = plan_ilp(svcs, TABLE, A100, PARVAGPU_RULE)
    assert plan.gpus_used == optimum
    assert plan.optimal and plan.lower_bound == optimum
    assert lp_lower_bound(svcs, TABLE, A100, PARVAGPU_RULE) >= lp_bound
    heur = plan_heuristic(svcs, TABLE, A100, PARVAGPU_RULE)
    assert heur.lower_bound <= optimum <= heur.gpus_used
    for p in (plan, heur):
        assert all(c.meets_rate for c in p.capacities())
        for g in p.gpus:
            assert is_legal(A100, g.layout.placements)
            assert len({i.segment.service for i in g.instances}) >= 1


def test_headroom_rule_plans_more_capacity() -> None:
    svcs = parvagpu_scenario(5)
    rule = replace(PARVAGPU_RULE, max_utilization=0.9)
    plan = plan_ilp(svcs, TABLE, A100, rule)
    assert all(c.utilization <= 0.9 + 1e-9 for c in plan.capacities())
    assert plan.gpus_used >= 12


def test_pre_r510_has_one_pattern_fewer() -> None:
    assert len(patterns(A100)) == 14
    assert len(patterns(A100, r510=False)) == 13
    svcs = (Service("a", "resnet152", 1400.0, 80.0),)
    plan = plan_services(svcs, TABLE, A100, BatchingRule(), r510=False)
    for g in plan.gpus:
        assert not {"4g", "3g"} <= set(g.layout.kinds())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "magic"}, "unknown planning method"),
        ({"gpu": "H100-80GB"}, "profile table is for A100-80GB"),
    ],
    ids=["bad-method", "gpu-without-profiles"],
)
def test_plan_services_errors(kwargs: dict[str, str], match: str) -> None:
    gpu = mig_gpu(kwargs.pop("gpu", "A100-80GB"))
    with pytest.raises(SpecError, match=match):
        plan_services(parvagpu_scenario(1), TABLE, gpu, BatchingRule(), **kwargs)


@pytest.mark.parametrize(
    ("rate", "slo"), [(0.0, 10.0), (10.0, -1.0)], ids=["zero-rate", "negative-slo"]
)
def test_service_validation(rate: float, slo: float) -> None:
    with pytest.raises(SpecError):
        Service("x", "resnet50", rate, slo)


def test_heuristic_plans_1000_services() -> None:
    """Every service meets its rate at scale (the 1 s target is in benchmarks/bench_share.py)."""
    models = TABLE.models()
    svcs = tuple(
        Service(f"s{i}", models[i % len(models)], 20.0 + (i * 37) % 2900, 150.0 + (i * 13) % 400)
        for i in range(1000)
    )
    plan = plan_heuristic(svcs, TABLE, A100, BatchingRule())
    assert all(c.meets_rate for c in plan.capacities())
    assert plan.lower_bound <= plan.gpus_used
