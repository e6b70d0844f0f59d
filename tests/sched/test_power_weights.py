"""Which jobs the power-budget stage caps or holds (issue 34, part 3a): while jobs wait the
long ones lose power first (remaining time on the board they run on), with nobody waiting
every job weighs the same (a job near completion is not capped first), a gang is capped
before a one-GPU job (its step saves more watts for one job's delay), and a job held for
power while jobs wait is the one with the most work left."""

from __future__ import annotations

import random

import pytest

from tessera.model.jobs import JobState
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.power_budget import cluster_power_w, levels_for
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.power_weights import MAX_CLASS, weight_of_remaining
from tessera.sched.core.snapshot import Placement
from tests.builders import RESNET, make_cluster, make_job, snapshot, view

RESNET50 = "ResNet-50 (batch size 64)"

MODEL = default_power_model()
SHORT, LONG = 2_000.0, 200_000.0


def test_weights_halve_with_each_doubling_of_the_remaining_time() -> None:
    assert weight_of_remaining(0.5) == 1.0
    assert weight_of_remaining(1.0) == 1.0
    assert weight_of_remaining(8.0) == weight_of_remaining(15.9) == 1 / 8
    assert weight_of_remaining(16.0) == 1 / 16
    assert weight_of_remaining(float("inf")) == 2.0 ** -MAX_CLASS


def _round(first: str, *, waiting: bool):
    """Two V100s for a short and a long job (``first`` submitted first); with ``waiting`` a
    2-GPU job queues behind them. The budget fits both only with one a step down."""
    cluster = make_cluster().node("v100", gpus=1, count=2).build()
    steps = {"short": SHORT, "long": LONG}
    order = [first, "long" if first == "short" else "short"]
    jobs = [make_job(name, steps=steps[name], submit_s=float(i)) for i, name in
            enumerate(order)]
    if waiting:
        jobs.append(make_job("wide", gpus=2, submit_s=5.0))
    snap = snapshot(cluster, *(view(j) for j in jobs), now_s=10.0)
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster), random.Random(0))
    _lims, draws, _speeds = levels_for(MODEL).of_key((RESNET, None, cluster.nodes[0].flavor))
    budget_w = draws[0] + draws[1] + 1e-6
    d = decide(snap, make_policy("fifo"), ctx,
               PlacementOptions(power_budget=PowerBudget(budget_w, MODEL)))
    assert set(d.started) == {make_job("short").job_id, make_job("long").job_id}
    assert cluster_power_w(snap, d.placements, MODEL, d.power_limits_w) <= budget_w
    return {str(j) for j in d.power_limits_w}


def test_while_jobs_wait_the_long_job_is_capped() -> None:
    assert _round("short", waiting=True) == {"long"}


def _capped(views: list, cluster, budget_w: float, waiting: bool) -> set[str]:
    """The jobs capped by one fifo round over ``views`` (running) under ``budget_w``; with
    ``waiting`` a 4-GPU job queues that cannot fit."""
    if waiting:
        views = [*views, view(make_job("wide", gpus=4, submit_s=5.0))]
    snap = snapshot(cluster, *views, now_s=10.0)
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster), random.Random(0))
    d = decide(snap, make_policy("fifo"), ctx,
               PlacementOptions(power_budget=PowerBudget(budget_w, MODEL)))
    assert cluster_power_w(snap, d.placements, MODEL, d.power_limits_w) <= budget_w
    assert bool(d.pending) == waiting
    return {str(j) for j in d.power_limits_w}


def _running(cluster, name: str, node: int, **kw: object):
    n = cluster.nodes[node]
    return view(make_job(name, **kw), JobState.RUNNING, Placement.of(n.flavor, ((n.node_id, 1),)))


def test_with_nobody_waiting_a_job_near_completion_is_not_capped_first() -> None:
    """A ResNet-18 with 83 s left and a ResNet-50 with 13 h left on two V100s; one step of
    either fits the budget. The ResNet-50 loses less speed per watt, so it is capped; the
    former rule (capping the shortest first with nobody waiting) capped the ResNet-18, whose
    board then stays busy longer for the next arrival."""
    cluster = make_cluster().node("v100", gpus=1, count=2).build()
    v100 = cluster.nodes[0].flavor
    views = [_running(cluster, "near", 0, steps=SHORT),
             _running(cluster, "long", 1, steps=LONG, job_type=RESNET50)]
    full_w = sum(levels_for(MODEL).of_key((t, None, v100))[1][0] for t in (RESNET, RESNET50))
    assert _capped(views, cluster, full_w - 1.0, waiting=False) == {"long"}


def test_while_jobs_wait_remaining_time_is_read_on_the_jobs_own_board() -> None:
    """Two ResNet-18s with the same steps left, one on a K80 and one on a V100, while a job
    waits. On a V100 each has ~1,000 s left (the same weight, and the K80 then loses more per
    watt, so the V100 job was capped); on the board it runs on the K80 job has ~3,400 s left,
    so it is the longer one and is capped (SRPT: the short job keeps its speed)."""
    cluster = make_cluster().node("v100", gpus=1, count=1).node("k80", gpus=1, count=1).build()
    views = [_running(cluster, "on_k80", 1, steps=24_000.0),
             _running(cluster, "on_v100", 0, steps=24_000.0)]
    full_w = sum(levels_for(MODEL).of_key((RESNET, None, n.flavor))[1][0]
                 for n in cluster.nodes)
    assert _capped(views, cluster, full_w - 1.0, waiting=True) == {"on_k80"}


@pytest.mark.parametrize("waiting", [True, False])
def test_a_gang_is_capped_before_a_one_gpu_job(waiting: bool) -> None:
    """A 2-GPU ResNet-18 with 1,500 s left and a 1-GPU one with 1,800 s left, on V100s; one
    step of either fits the budget. The gang's step saves twice the watts for one job's
    delay, so it is capped: with nobody waiting by its weight 1/2, while a job waits by its
    remaining GPU-seconds (3,000 against 1,800). Without the GPU count both weigh the same
    and the first-placed job, the one-GPU one, was capped."""
    cluster = make_cluster().node("v100", gpus=1, count=1).node("v100", gpus=2, count=1).build()
    oracle = ThroughputOracle(default_throughputs(), cluster)
    one_s, two_s = oracle.best_rate(make_job("x")), oracle.best_rate(make_job("x", gpus=2))
    gang_node = cluster.nodes[1]
    views = [_running(cluster, "single", 0, steps=1_800.0 * one_s),
             view(make_job("gang", gpus=2, steps=1_500.0 * two_s, submit_s=1.0),
                  JobState.RUNNING, Placement.of(gang_node.flavor, ((gang_node.node_id, 2),)))]
    full_w = 3 * levels_for(MODEL).of_key((RESNET, None, gang_node.flavor))[1][0]
    assert _capped(views, cluster, full_w - 1.0, waiting=waiting) == {"gang"}


@pytest.mark.parametrize("waiting", [True, False])
def test_the_job_held_for_power_is_the_lightest(waiting: bool) -> None:
    """One V100 busy, two starting; the budget fits only one more even at the lowest limit.
    While a wide job waits the long starter is held (SRPT), though it is ranked *first* (the
    last-ranked rule would hold the other); with nobody waiting every job weighs the same and
    the last-ranked starter (the long one) is held (the former rule held the short one)."""
    cluster = make_cluster().node("v100", gpus=1, count=3).build()
    v100 = cluster.nodes[0].flavor
    run = view(make_job("run", steps=LONG), JobState.RUNNING,
               Placement.of(v100, ((cluster.nodes[0].node_id, 1),)))
    first, second = ("long", "short") if waiting else ("short", "long")  # long held either way
    steps = {"short": SHORT, "long": LONG}
    views = [run, view(make_job(first, steps=steps[first], submit_s=1.0)),
             view(make_job(second, steps=steps[second], submit_s=2.0))]
    if waiting:
        views.append(view(make_job("wide", gpus=4, submit_s=3.0)))
    snap = snapshot(cluster, *views, now_s=10.0)
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster), random.Random(0))
    lo = MODEL.limit_range(v100).min_w
    low_w = MODEL.estimate(RESNET, None, v100, lo).avg_power_w
    budget_w = 2 * low_w + MODEL.idle_power_w(v100) + 1.0
    d = decide(snap, make_policy("fifo"), ctx,
               PlacementOptions(power_budget=PowerBudget(budget_w, MODEL)))
    held = {str(j) for j in (make_job("short").job_id, make_job("long").job_id)
            if j not in d.placements}
    assert held == {"long"}
