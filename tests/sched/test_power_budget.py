"""The power-budget stage (issue 34, part 3a): limits where they cost least, waiting last,
the uniform baseline, and nothing at all without a budget."""

from __future__ import annotations

import random

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId, JobState
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.power_budget import budget_stage, cluster_power_w
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.reasons import PowerHeld
from tessera.sched.core.snapshot import Placement
from tests.builders import make_cluster, make_job, snapshot, view

MODEL = default_power_model()
V100 = resolve_flavor("v100")


def _busy(n_jobs: int, gpus: int = 1):
    """A V100 cluster of ``n_jobs`` nodes × ``gpus``, each node running one job."""
    cluster = make_cluster().node("v100", gpus=gpus, count=n_jobs).build()
    views = []
    for i, node in enumerate(cluster.nodes):
        p = Placement.of(V100, ((node.node_id, gpus),))
        views.append(view(make_job(f"j{i}", gpus=gpus), JobState.RUNNING, p))
    snap = snapshot(cluster, *views)
    return snap, {v.spec.job_id: v.placement for v in views}


def test_under_budget_changes_nothing() -> None:
    snap, placements = _busy(4)
    full = cluster_power_w(snap, placements, MODEL)
    out = budget_stage(snap, placements, (), PowerBudget(full + 1.0, MODEL))
    assert out.limits_w == {} and out.held == ()
    assert out.power_w == pytest.approx(full)


def test_over_budget_caps_until_it_fits_and_spreads_the_cut() -> None:
    snap, placements = _busy(4)
    full = cluster_power_w(snap, placements, MODEL)
    budget = PowerBudget(0.8 * full, MODEL)
    out = budget_stage(snap, placements, (), budget)
    assert out.held == ()
    assert out.power_w <= budget.budget_w + 1e-9
    assert cluster_power_w(snap, placements, MODEL, out.limits_w) == pytest.approx(out.power_w)
    # identical jobs on identical boards: no job is cut more than one step below another
    lims = sorted(out.limits_w.values())
    assert len(lims) == 4 and lims[-1] - lims[0] <= MODEL.limit_range(V100).step_w + 1e-9


def test_cheapest_throughput_per_watt_is_cut_first() -> None:
    """A gang on two boards saves twice the watts per step for twice the throughput: the
    stage is indifferent per GPU, so both jobs end within one step of each other per GPU --
    and a budget that one step on the big gang meets caps nothing else."""
    cluster = make_cluster().node("v100", gpus=2).node("v100", gpus=1).build()
    big = view(make_job("big", gpus=2), JobState.RUNNING,
               Placement.of(V100, ((cluster.nodes[0].node_id, 2),)))
    small = view(make_job("small"), JobState.RUNNING,
                 Placement.of(V100, ((cluster.nodes[1].node_id, 1),)))
    snap = snapshot(cluster, big, small)
    placements = {big.spec.job_id: big.placement, small.spec.job_id: small.placement}
    full = cluster_power_w(snap, placements, MODEL)
    out = budget_stage(snap, placements, (), PowerBudget(full - 1.0, MODEL))
    assert out.power_w <= full - 1.0
    assert len(out.limits_w) == 1  # one step on one job was enough


def test_jobs_wait_when_even_the_lowest_limits_do_not_fit() -> None:
    cluster = make_cluster().node("v100", gpus=1, count=3).build()
    running = view(make_job("run"), JobState.RUNNING,
                   Placement.of(V100, ((cluster.nodes[0].node_id, 1),)))
    a, b = make_job("a"), make_job("b")
    snap = snapshot(cluster, running, view(a), view(b))
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster), random.Random(0))
    plain = decide(snap, make_policy("fifo"), ctx)
    assert set(plain.started) == {a.job_id, b.job_id}
    # room for two GPUs at the lowest limit plus one idle board, not three busy ones
    lo = MODEL.limit_range(V100).min_w
    budget_w = 2 * lo + MODEL.idle_power_w(V100) + 1.0
    opts = PlacementOptions(power_budget=PowerBudget(budget_w, MODEL))
    d = decide(snap, make_policy("fifo"), ctx, opts)
    assert d.started == (a.job_id,)
    assert b.job_id not in d.placements
    why = d.pending[b.job_id]
    assert isinstance(why.detail, PowerHeld) and "power budget" in str(why)
    assert cluster_power_w(snap, d.placements, MODEL, d.power_limits_w) <= budget_w


def test_uniform_caps_every_gpu_at_one_fraction() -> None:
    snap, placements = _busy(4)
    full = cluster_power_w(snap, placements, MODEL)
    out = budget_stage(snap, placements, (), PowerBudget(0.8 * full, MODEL, "uniform"))
    assert len(set(out.limits_w.values())) == 1 and len(out.limits_w) == 4
    assert out.power_w <= 0.8 * full


def test_no_budget_no_limits() -> None:
    snap, _ = _busy(2)
    cluster = snap.cluster
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster), random.Random(0))
    assert decide(snap, make_policy("fifo"), ctx).power_limits_w == {}


def test_bad_budget_and_limit_are_named() -> None:
    with pytest.raises(SpecError, match="-3"):
        PowerBudget(-3.0, MODEL)
    with pytest.raises(SpecError, match=r"1000\.0 W is outside"):
        MODEL.estimate("x", None, V100, 1000.0)
    assert JobId("a") == make_job("a").job_id
