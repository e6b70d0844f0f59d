"""Serving simulation of plans and re-planning after load changes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.share.arrivals import read_trace_times, shaped_streams
from tessera.share.mig import mig_gpu
from tessera.share.packing import plan_ilp
from tessera.share.profiles import (
    PARVAGPU_RULE,
    BatchingRule,
    load_parvagpu_profiles,
    parvagpu_scenario,
)
from tessera.share.replan import replan
from tessera.share.serving_sim import RequestStream, poisson_streams, simulate

A100 = mig_gpu("A100-80GB")
TABLE = load_parvagpu_profiles()
TRACES = Path("/work/shared/data/traces")


@pytest.mark.parametrize("scenario", [1, 3, 4], ids=["s1", "s3", "s4"])
def test_default_rule_plans_meet_slo_under_poisson(scenario: int) -> None:
    svcs = parvagpu_scenario(scenario)
    plan = plan_ilp(svcs, TABLE, A100, replace(BatchingRule(), latency_fraction=0.45))
    result = simulate(plan, poisson_streams(svcs, 5.0, seed=1), TABLE, seed=1)
    assert result.violations == 0
    assert result.attainment > 0.99


def test_overloaded_plan_violates() -> None:
    svcs = parvagpu_scenario(1)
    plan = plan_ilp(svcs, TABLE, A100, BatchingRule())
    heavy = tuple(replace(s, rate_rps=s.rate_rps * 3) for s in svcs)
    streams = poisson_streams(heavy, 3.0, seed=0)
    result = simulate(plan, streams, TABLE)
    assert result.violations > 0


def test_simulation_is_deterministic_and_pure() -> None:
    svcs = parvagpu_scenario(2)
    plan = plan_ilp(svcs, TABLE, A100, BatchingRule())
    streams = poisson_streams(svcs, 2.0, seed=3)
    a = simulate(plan, streams, TABLE, seed=3)
    b = simulate(plan, streams, TABLE, seed=3)
    assert a == b


@pytest.mark.parametrize("policy", ["greedy", "timeout"], ids=["greedy", "timeout"])
def test_single_request_latency_is_one_batch(policy: str) -> None:
    svcs = parvagpu_scenario(1)[:1]
    plan = plan_ilp(svcs, TABLE, A100, BatchingRule())
    stream = RequestStream(svcs[0].name, np.array([0.5]))
    out = simulate(plan, (stream,), TABLE, batching=policy).services[0]
    seg = plan.instances_of(svcs[0].name)[0].segment
    single = TABLE.point(seg.model, seg.kind, 1, seg.procs).latency_ms
    assert out.p99_ms >= single - 1e-6
    assert out.p99_ms <= svcs[0].slo_ms


def test_unknown_stream_service_rejected() -> None:
    svcs = parvagpu_scenario(1)
    plan = plan_ilp(svcs, TABLE, A100, BatchingRule())
    with pytest.raises(SpecError, match="unknown service"):
        simulate(plan, (RequestStream("nope", np.array([0.1])),), TABLE)


@pytest.mark.parametrize("kind", ["genai", "dlrm"], ids=["genai", "dlrm"])
def test_trace_shaped_streams(kind: str) -> None:
    if not TRACES.exists():
        pytest.skip("traces not available")
    times = read_trace_times(kind, TRACES)
    svcs = parvagpu_scenario(1)
    streams = shaped_streams(svcs, times, 20.0, seed=0)
    for s, st in zip(svcs, streams, strict=True):
        assert np.all(np.diff(st.arrivals_s) >= 0)
        assert len(st.arrivals_s) == pytest.approx(s.rate_rps * 20.0, rel=0.6)
    gaps = np.diff(streams[-1].arrivals_s)
    assert gaps.std() / gaps.mean() > 1.0  # burstier than Poisson (CV 1)
    plan = plan_ilp(svcs, TABLE, A100, BatchingRule())
    assert 0.0 <= simulate(plan, streams, TABLE).attainment <= 1.0


def test_unknown_trace_rejected() -> None:
    with pytest.raises(SpecError, match="unknown trace"):
        read_trace_times("philly", TRACES)


def test_replan_same_load_changes_nothing() -> None:
    svcs = parvagpu_scenario(4)
    plan = plan_ilp(svcs, TABLE, A100, PARVAGPU_RULE)
    tr = replan(plan, svcs, TABLE, A100)
    assert tr.changes == ()
    assert tr.plan.gpus_used == plan.gpus_used


def test_replan_load_change_keeps_most_instances() -> None:
    svcs = parvagpu_scenario(5)
    plan = plan_ilp(svcs, TABLE, A100, PARVAGPU_RULE)
    new = tuple(
        replace(s, rate_rps=s.rate_rps * (1.2 if i % 2 else 0.8)) for i, s in enumerate(svcs)
    )
    new = new[:-1]  # one service removed
    tr = replan(plan, new, TABLE, A100)
    before = sum(len(g.instances) for g in plan.gpus)
    assert all(c.meets_rate for c in tr.plan.capacities())
    assert 0 < tr.torn_down < before / 2
    removed = svcs[-1].name
    assert all(i.segment.service != removed for g in tr.plan.gpus for i in g.instances)
    actions = [c.action for c in tr.changes]
    assert actions == sorted(actions, key=["create", "reassign", "retune", "destroy"].index)
    assert tr.plan.gpus_used <= tr.fresh_gpus + 2
