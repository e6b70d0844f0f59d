"""Load that changes (issue 36, part 3): re-plan per window at the MIG reconfiguration cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.share.mig import mig_gpu
from tessera.share.p99 import ArrivalModel, plan_for_p99
from tessera.share.profiles import BatchingRule, Service, load_parvagpu_profiles
from tessera.share.reconfig import (
    ReconfigCost,
    compare_strategies,
    moved_gpus,
    transition_s,
    window_levels,
)
from tessera.share.replan import replan
from tessera.share.traces import read_arrivals_csv

A100 = mig_gpu("A100-80GB")
SERVICES = (
    Service("r50", "resnet50", 12_000.0, 100.0),
    Service("vgg", "vgg16", 3_000.0, 200.0),
)


def _day_night(path: Path) -> Path:
    """Four 1-hour windows: busy, quiet, quiet, busy (10 : 1 in events)."""
    parts = [np.arange(h * 3600, (h + 1) * 3600, step) for h, step in
             enumerate((1.0, 10.0, 10.0, 1.0))]
    path.write_text("arrival_s\n" + "\n".join(f"{t:g}" for t in np.concatenate(parts)))
    return path


def test_levels_round_up_and_floor(tmp_path: Path) -> None:
    tr = read_arrivals_csv(_day_night(tmp_path / "t.csv"))
    lv = window_levels(tr, 1.0)
    assert lv[0] == 1.0 and lv[3] == 1.0
    assert 0.1 <= lv[1] < 0.11  # 360 / 3600 rounded up on the 10 % grid


def test_replanning_saves_gpu_hours_at_the_same_p99(tmp_path: Path) -> None:
    """Finding: load never changed; a plan held for the peak wastes the quiet hours."""
    tr = read_arrivals_csv(_day_night(tmp_path / "t.csv"))
    c = compare_strategies(SERVICES, tr, load_parvagpu_profiles(), A100, BatchingRule(),
                           window_h=1.0, arrivals=ArrivalModel(requests_per_service=2_000))
    peak, free, paid = c.get("peak"), c.get("replan-free"), c.get("replan")
    assert peak.violating_windows == free.violating_windows == paid.violating_windows == 0
    assert paid.transitions == 2 and paid.transition_gpu_hours > 0
    assert free.gpu_hours <= paid.gpu_hours < peak.gpu_hours
    assert c.saving_vs_peak >= 0.2


def test_transition_creates_before_destroying_and_costs_time() -> None:
    """A scale-down keeps every service's instances until the new ones exist (create, then
    reassign/retune, then destroy), and its price follows the per-step times."""
    table = load_parvagpu_profiles()
    big = plan_for_p99(SERVICES, table, A100, BatchingRule(),
                       arrivals=ArrivalModel(requests_per_service=2_000)).plan
    small = tuple(Service(s.name, s.model, s.rate_rps / 10, s.slo_ms) for s in SERVICES)
    tr = replan(big, small, table, A100)
    order = [c.action for c in tr.changes]
    assert order == sorted(order, key=["create", "reassign", "retune", "destroy"].index)
    assert "destroy" in order and tr.plan.gpus_used < big.gpus_used
    cost = ReconfigCost(create_s=2.0, destroy_s=1.0, load_s=10.0)
    assert transition_s(tr, cost) > 0
    assert transition_s(tr, ReconfigCost(flat_s=60.0)) == 60.0
    assert moved_gpus(big, tr) >= big.gpus_used - tr.plan.gpus_used


def test_bad_reconfig_inputs(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=">= 0 s"):
        ReconfigCost(create_s=-1.0)
    tr = read_arrivals_csv(_day_night(tmp_path / "t.csv"))
    with pytest.raises(SpecError, match="window must be > 0 h"):
        compare_strategies(SERVICES, tr, load_parvagpu_profiles(), A100, BatchingRule(),
                           window_h=0.0)
