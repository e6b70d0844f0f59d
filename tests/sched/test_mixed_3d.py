"""A job that asks for a 3-D plan is priced by that plan: on mixed and homogeneous gangs, in
the decision core and the simulator, from the cache the live service launches ranks from."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import ElasticRange, JobSpec, JobState, ThreeDParallel
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.feasibility import infeasibility
from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.oracle import ThroughputOracle, rate_key
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.plans import DEFAULT_MAX_PLANS, NoPlanError, ThreeDPlans, gang_shape
from tessera.sched.core.reasons import (
    CannotRun,
    MixNoPlan,
    NoCapacity,
    PendingKind,
    pending_reasons,
)
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import JobView, Placement
from tessera.sched.mixed.placement import Releases, try_mixed
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import make_cluster, make_job, make_workload, plan_json, snapshot, view

MODEL, BATCH = "gpt3-1.3b", 16
P3 = ThreeDParallel(MODEL, BATCH)
A100, V100 = resolve_flavor("A100-80GB"), resolve_flavor("V100-16GB")
MIXED = Placement.mixed((("n1", A100, 4), ("n2", V100, 4)))


def _cluster():  # type: ignore[no-untyped-def]
    return make_cluster().node("a100", gpus=4).node("v100", gpus=4).build()


def _job(gpus: int = 8, p3: ThreeDParallel | None = P3, job_id: str = "j") -> JobSpec:
    return make_job(job_id, gpus, steps=50, parallelism=p3)


def _cli_plan(devices: str, gpus_per_server: int) -> dict[str, object]:
    return plan_json(MODEL, devices, BATCH, gpus_per_server)


def test_the_scheduler_prices_a_mixed_3d_gang_at_tessera_plans_step_time() -> None:
    cli = _cli_plan("A100:4,V100:4", 4)
    oracle = ThroughputOracle(default_throughputs(), _cluster())
    job = _job()
    rate = oracle.placement_rate(job, MIXED)
    step_s = cli["step_time_s"]
    assert isinstance(step_s, float)
    assert 1.0 / rate == pytest.approx(step_s, rel=1e-12)
    # Without servers, the mix is laid out on full ones: the same plan here.
    assert oracle.mixed_rate(job, MIXED.flavor_counts()) == pytest.approx(rate, rel=1e-12)


def test_a_homogeneous_3d_gang_is_priced_by_its_plan_too() -> None:
    cli = _cli_plan("A100:4", 4)
    oracle = ThroughputOracle(default_throughputs(), _cluster())
    job = _job(gpus=4)
    one_server = Placement.of(A100, (("n1", 4),))
    step_s = cli["step_time_s"]
    assert isinstance(step_s, float)
    assert 1.0 / oracle.placement_rate(job, one_server) == pytest.approx(step_s, rel=1e-12)
    by_flavor = {r.flavor: r for r in oracle.real_rates(job)}
    assert by_flavor[A100].consolidated == oracle.placement_rate(job, one_server)
    # The same job type trained data parallel keeps its measured speed.
    dp = dataclasses.replace(job, parallelism=None)
    assert oracle.placement_rate(dp, one_server) == oracle.rate(dp, A100, True)


def test_the_rate_and_the_rank_roles_come_from_one_plan_object() -> None:
    oracle = ThroughputOracle(default_throughputs(), _cluster())
    rate = oracle.placement_rate(_job(), MIXED)
    priced = oracle.plans.plan(P3, MIXED.parts())
    launched = oracle.plans.ranked(P3, MIXED.parts())
    assert launched.plan is priced.plan and launched.breakdown is priced.breakdown
    assert 1.0 / rate == priced.plan.step_time_s
    searched = len(oracle.plans)
    # Another placement of the same shape reuses the plan, with ranks on its own GPUs.
    other = Placement.mixed((("x", A100, 4), ("y", V100, 4)))
    moved = oracle.plans.ranked(P3, other.parts())
    assert moved.plan is priced.plan
    assert {r.device.split(":")[0] for r in moved.ranks} == {"x", "y"}
    assert len(oracle.plans) == searched


def test_a_gang_no_plan_fits_is_not_taken_and_the_job_is_told_why() -> None:
    cluster = make_cluster().node("t4", gpus=2).node("k80", gpus=2).build()
    oracle = ThroughputOracle(default_throughputs(), cluster)
    job = _job(gpus=4, p3=ThreeDParallel("llama-70b", 8))
    mix = Placement.mixed((("t4-0", resolve_flavor("T4"), 2), ("k80-0", resolve_flavor("K80"), 2)))
    assert oracle.placement_rate(job, mix) == 0.0
    pred = oracle._mixed_rates().predict(job, mix.flavor_counts(), mix.parts())
    assert pred.steps_per_s == 0.0 and "no 3-D plan of llama-70b fits" in pred.source
    with pytest.raises(NoPlanError, match="llama-70b"):
        oracle.plans.plan(job.parallelism, mix.parts())  # type: ignore[arg-type]
    view = JobView(job, JobState.PENDING, job.total_steps)
    free = FreeGpus(cluster.nodes)
    opts = PlacementOptions(mixed_gangs=True)
    assert try_mixed(view, free, oracle, 0.0, opts, Releases([], 0.0)) is None
    why = infeasibility(job, cluster, oracle, mixed_gangs=True)
    assert why is not None and "llama-70b" in why and "short by" in why
    reason = pending_reasons([view], (), oracle, free, {job.job_id: False})[job.job_id]
    assert reason.kind is PendingKind.NO_FIT
    assert isinstance(reason.detail, CannotRun) and "short by" in reason.detail.why


def test_a_simulated_workload_with_a_3d_job_runs_at_its_plans_speed() -> None:
    c = _cluster()
    w = make_workload(_job(job_id="big"), make_job("dp", 2, steps=1000, submit_s=1))
    r = simulate(w, c, "fifo", SimConfig(scheduler=SchedulerSettings(mixed_gangs=True)))
    big = next(j for j in r.jobs if j.job_id == "big")
    assert big.outcome == "succeeded"
    placed = ThroughputOracle(default_throughputs(), c).plans
    step_s = placed.plan(P3, (("a100-0", 4, A100), ("v100-0", 4, V100))).plan.step_time_s
    assert big.jct_s == pytest.approx(50 * step_s, rel=1e-6)
    assert next(j for j in r.jobs if j.job_id == "dp").outcome == "succeeded"


def test_gang_shape_is_what_the_planner_reads() -> None:
    assert gang_shape((("a", 4, A100), ("b", 2, A100), ("c", 4, V100))) == (
        ((A100, 6), (V100, 4)), 4, 2)
    assert gang_shape((("a", 8, A100),)) == (((A100, 8),), 8, 8)
    with pytest.raises(SpecError, match="at least one GPU"):
        gang_shape(())


@pytest.mark.parametrize(("kw", "needle"), [
    ({"parallelism": ThreeDParallel(MODEL, 4)}, "global batch of at least its 8 GPUs"),
    ({"parallelism": P3, "elastic": ElasticRange(4, 8, 16, 32, "cifar10", 1e5)},
     "rigid gang"),
])
def test_bad_3d_specs_are_refused(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        make_job("j", 8, **kw)


def test_a_3d_parallelism_needs_a_model_and_a_batch() -> None:
    with pytest.raises(SpecError, match="layer-wise model name"):
        ThreeDParallel(" ", 8)
    with pytest.raises(SpecError, match="global batch must be >= 1"):
        ThreeDParallel(MODEL, 0)


def test_a_plan_cache_is_per_oracle_and_shared_with_its_agnostic_twin() -> None:
    a = ThroughputOracle(default_throughputs(), _cluster())
    b = ThroughputOracle(default_throughputs(), _cluster())
    assert a.plans is not b.plans
    assert a.as_agnostic().plans is a.plans
    shared = ThreeDPlans()
    assert ThroughputOracle(default_throughputs(), _cluster(), plans=shared).plans is shared


def test_a_simulated_3d_job_no_plan_fits_is_rejected_with_the_planners_message() -> None:
    c = make_cluster().node("t4", gpus=2).node("k80", gpus=2).build()
    w = make_workload(_job(gpus=4, p3=ThreeDParallel("llama-70b", 8), job_id="huge"))
    r = simulate(w, c, "fifo", SimConfig(scheduler=SchedulerSettings(mixed_gangs=True)))
    assert r.jobs[0].outcome == "rejected"
    assert "no 3-D plan of llama-70b fits" in r.jobs[0].reason and "short by" in r.jobs[0].reason


def test_a_3d_job_never_shares_cached_rates_with_a_data_parallel_job_of_its_type() -> None:
    oracle = ThroughputOracle(default_throughputs(), _cluster())
    dp, p3 = _job(gpus=4, p3=None), _job(gpus=4)
    for orc in (oracle, oracle.as_agnostic()):
        first = orc.rates(dp)
        assert orc.rates(p3) != first and orc.rates(dp) == first
    assert rate_key(dp) != rate_key(p3)


def test_the_plan_cache_forgets_the_least_recently_used_shape_beyond_its_cap() -> None:
    assert ThreeDPlans().max_plans == DEFAULT_MAX_PLANS
    plans = ThreeDPlans(max_plans=2)
    a, b, c = ((("n1", 4, A100),), (("n1", 4, V100),), (("n1", 2, A100), ("n2", 2, V100)))
    first_a, first_b = plans.plan(P3, a), plans.plan(P3, b)
    assert plans.plan(P3, a) is first_a             # a hit makes a the most recently used
    plans.plan(P3, c)                               # a third shape: b, the least recent, goes
    assert len(plans) == 2
    assert plans.plan(P3, a) is first_a
    again_b = plans.plan(P3, b)                     # searched again: an equal, new plan
    assert again_b is not first_b and again_b.plan == first_b.plan
    with pytest.raises(SpecError, match="at least 1 plan, got max_plans=0"):
        ThreeDPlans(max_plans=0)


#: Seven flavors, each with one 8-GPU server: more than one pipeline plan may mix.
SEVEN = ("V100-32GB", "L40S", "A100-40GB", "A100-80GB", "H100-80GB", "RTX-6000", "A10")


def test_a_3d_job_whose_free_mix_fits_no_plan_is_told_the_planners_reason() -> None:
    """Every flavor alone could run the job (7 GPUs of one server), but each server has one
    GPU free; the mix of those seven fits no plan, and the job is told so, not just that
    capacity is short."""
    builder = make_cluster()
    for f in SEVEN:
        builder = builder.node(f.lower(), gpus=8)
    cluster = builder.build()
    busy = [view(make_job(f"busy{k}", 7, steps=10**6), JobState.RUNNING,
                 Placement.of(n.flavor, ((n.node_id, 7),)))
            for k, n in enumerate(cluster.nodes)]
    job = make_job("big", 7, steps=50, parallelism=ThreeDParallel("llama-7b", 14))
    oracle = ThroughputOracle(default_throughputs(), cluster)
    assert len(oracle.real_rates(job)) == len(SEVEN)        # one flavor alone fits
    snap = snapshot(cluster, *busy, view(job))
    mixed = decide(snap, make_policy("fifo"), DecisionContext(oracle, random.Random(0)),
                   PlacementOptions(mixed_gangs=True))
    reason = mixed.pending["big"]
    assert "big" not in mixed.placements and reason.kind is PendingKind.CAPACITY
    assert isinstance(reason.detail, MixNoPlan)
    assert "no 3-D plan of llama-7b fits 1×" in str(reason) and "at most 6 GPU flavors" in str(
        reason)
    # Without mixed gangs the free mix is no option, and the reason is plain capacity.
    plain = decide(snap, make_policy("fifo"), DecisionContext(oracle, random.Random(0)),
                   PlacementOptions())
    assert isinstance(plain.pending["big"].detail, NoCapacity)
