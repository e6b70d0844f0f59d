"""Displacement under a power budget (issue 34, part 3a): a start on a far slower board waits
for the fast board a running job frees soon, only while the budget binds."""

from __future__ import annotations

import random

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.power_budget import cluster_power_w
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.snapshot import Placement
from tests.builders import make_cluster, make_job, snapshot, view

MODEL = default_power_model()
V100, K80 = resolve_flavor("v100"), resolve_flavor("k80")


def _round(holder_steps_left: float, budget_cut_w: float, wait_for_fast: bool,
           behind: bool = False):
    """One V100 held by a running job with ``holder_steps_left`` steps left, one free K80,
    and a long job arriving (FIFO puts it on the K80) -- with ``behind``, a short job queued
    after it; the budget is the all-busy draw less ``budget_cut_w`` (one cap step covers
    10 W)."""
    cluster = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    fast = Placement.of(V100, ((cluster.nodes[0].node_id, 1),))
    holder = view(make_job("holder", steps=1e5), JobState.RUNNING, fast,
                  remaining_steps=holder_steps_left)
    new = view(make_job("new", steps=1e5, submit_s=0.0))
    after = (view(make_job("next", steps=1e3, submit_s=1.0)),) if behind else ()
    snap = snapshot(cluster, holder, new, *after, now_s=1.0)
    slow = Placement.of(K80, ((cluster.nodes[1].node_id, 1),))
    full = cluster_power_w(snap, {holder.spec.job_id: fast, new.spec.job_id: slow}, MODEL)
    budget = PowerBudget(full - budget_cut_w, MODEL, wait_for_fast=wait_for_fast)
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster), random.Random(0))
    return decide(snap, make_policy("fifo"), ctx, PlacementOptions(power_budget=budget)), snap


def test_a_start_on_a_far_slower_board_waits_for_the_fast_board_freeing_soon() -> None:
    d, _ = _round(holder_steps_left=100.0, budget_cut_w=10.0, wait_for_fast=True)
    assert "new" not in d.placements and "new" in d.pending
    assert d.power_limits_w == {}  # the holder is not capped: holding freed the power
    # its reason says why (it said "with every job capped", untrue here: nothing is capped)
    assert "waits for a far faster board a running job frees soon" in str(d.pending["new"])


def test_without_the_rule_it_starts_on_the_slow_board_and_the_holder_is_capped() -> None:
    d, _ = _round(holder_steps_left=100.0, budget_cut_w=10.0, wait_for_fast=False)
    assert d.placements["new"].flavors[0] == K80
    assert d.power_limits_w


def test_it_starts_when_the_fast_board_frees_too_late() -> None:
    d, _ = _round(holder_steps_left=1e6, budget_cut_w=10.0, wait_for_fast=True)
    assert d.placements["new"].flavors[0] == K80


def test_nothing_waits_while_the_budget_does_not_bind() -> None:
    d, _ = _round(holder_steps_left=100.0, budget_cut_w=-10.0, wait_for_fast=True)
    assert d.placements["new"].flavors[0] == K80 and d.power_limits_w == {}


def test_a_job_held_for_a_fast_board_leaves_its_slow_board_to_the_job_behind() -> None:
    # Without the refill the K80 the held job was given sat idle until the next event and
    # the job queued behind it waited too (3 jobs/h FIFO seed 2: +2,507 h to the others).
    d, snap = _round(holder_steps_left=100.0, budget_cut_w=10.0, wait_for_fast=True,
                     behind=True)
    assert "new" not in d.placements
    assert "waits for a far faster board" in str(d.pending["new"])
    assert d.placements["next"].flavors[0] == K80 and "next" in d.started
    budget_w = cluster_power_w(snap, {"holder": d.placements["holder"],
                                      "new": d.placements["next"]}, MODEL) - 10.0
    assert cluster_power_w(snap, d.placements, MODEL, d.power_limits_w) <= budget_w


def test_without_the_rule_the_job_behind_waits_for_the_first_one() -> None:
    d, _ = _round(holder_steps_left=100.0, budget_cut_w=10.0, wait_for_fast=False, behind=True)
    assert d.placements["new"].flavors[0] == K80 and "next" in d.pending
