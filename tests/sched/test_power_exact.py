"""The exact choice of power limits (issue 34, part 3a): a multiple-choice knapsack solved
exactly, checked against brute force, and the greedy's gap on the same snapshots."""

from __future__ import annotations

import itertools
import random

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.power_estimate import default_power_model
from tessera.sched.core.power_budget import (
    budget_stage,
    cluster_power_w,
    levels_for,
    limit_classes,
)
from tessera.sched.core.power_exact import LimitClass, class_loss, solve_classes
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.snapshot import Placement
from tests.builders import make_cluster, make_job, snapshot, view

MODEL = default_power_model()
TYPES = ("ResNet-18 (batch size 128)", "Transformer (batch size 64)",
         "A3C", "CycleGAN", "LM (batch size 20)")


def _brute(classes: list[LimitClass], cap_w: float) -> float:
    """The least loss over every level of every job, one job at a time."""
    jobs = [cl for cl in classes for _ in range(cl.count)]
    best = float("inf")
    for levels in itertools.product(*(range(len(cl.cost)) for cl in jobs)):
        if sum(cl.watts[lv] for cl, lv in zip(jobs, levels, strict=True)) <= cap_w:
            best = min(best, sum(cl.cost[lv] for cl, lv in zip(jobs, levels, strict=True)))
    return best


def _mixed(seed: int):
    """A small cluster of V100/P100/K80 nodes, each running one job of a random type,
    GPU count and weight; returns the snapshot, the placements and the weights."""
    rng = random.Random(seed)
    flavors = [resolve_flavor(rng.choice(("v100", "p100", "k80"))) for _ in range(4)]
    b = make_cluster()
    for fl in flavors:
        b = b.node(fl.name, gpus=2)
    cluster = b.build()
    views, weights = [], {}
    for i, (node, fl) in enumerate(zip(cluster.nodes, flavors, strict=True)):
        g = rng.choice((1, 2))
        p = Placement.of(fl, ((node.node_id, g),))
        v = view(make_job(f"j{i}", gpus=g, job_type=rng.choice(TYPES)), JobState.RUNNING, p)
        views.append(v)
        weights[v.spec.job_id] = rng.choice((1.0, 0.5, 0.25))
    snap = snapshot(cluster, *views)
    return snap, {v.spec.job_id: v.placement for v in views}, weights


def test_solver_finds_the_brute_force_optimum_on_small_classes() -> None:
    rng = random.Random(7)
    for _ in range(40):
        classes = []
        for _k in range(rng.randint(1, 3)):
            m = rng.randint(2, 4)
            watts = sorted((rng.uniform(50, 300) for _ in range(m)), reverse=True)
            cost = [0.0] + [rng.uniform(0, 1) for _ in range(m - 1)]  # not convex
            classes.append(LimitClass(rng.randint(1, 2), tuple(cost), tuple(watts)))
        top = sum(cl.count * cl.watts[0] for cl in classes)
        low = sum(cl.count * cl.watts[-1] for cl in classes)
        cap = rng.uniform(low, top)
        got = solve_classes(classes, cap, time_limit_s=5.0)
        assert got is not None
        assert class_loss(classes, got) == pytest.approx(_brute(classes, cap), abs=1e-7)


def test_infeasible_returns_none() -> None:
    cl = LimitClass(2, (0.0, 0.5), (200.0, 100.0))
    assert solve_classes([cl], 199.0) is None


def test_bad_class_is_refused() -> None:
    with pytest.raises(ValueError, match="one cost per draw"):
        LimitClass(1, (0.0,), (200.0, 100.0))
    with pytest.raises(SpecError, match="flow, exact or uniform"):
        PowerBudget(1000.0, MODEL, "best")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
def test_exact_stage_is_optimal_under_budget_and_never_worse_than_greedy(seed: int) -> None:
    """On real power curves, the exact stage keeps the budget, its weighted loss is the brute
    force minimum, and the greedy's loss is at least that."""
    snap, placements, weights = _mixed(seed)
    full = cluster_power_w(snap, placements, MODEL)
    levels = levels_for(MODEL)
    classes, members, lims = limit_classes(snap, placements, levels, weights)
    idle_and_rest = full - sum(cl.count * cl.watts[0] for cl in classes)
    for share in (0.95, 0.85, 0.75):
        budget_w = share * full
        ex = budget_stage(snap, placements, (), PowerBudget(budget_w, MODEL, "exact"),
                          levels, weights)
        gr = budget_stage(snap, placements, (), PowerBudget(budget_w, MODEL, "flow"),
                          levels, weights)
        if ex.held or gr.held:
            continue
        assert ex.power_w <= budget_w + 1e-9
        assert cluster_power_w(snap, placements, MODEL, ex.limits_w) == pytest.approx(
            ex.power_w)

        def loss(limits: dict) -> float:
            counts = [[0] * len(cl.cost) for cl in classes]
            for k, jids in enumerate(members):
                for jid in jids:
                    lim = limits.get(jid)
                    counts[k][0 if lim is None else lims[k].index(lim)] += 1
            return class_loss(classes, counts)

        best = _brute(classes, budget_w - idle_and_rest)
        assert loss(dict(ex.limits_w)) == pytest.approx(best, abs=1e-9)
        assert loss(dict(gr.limits_w)) >= best - 1e-9
