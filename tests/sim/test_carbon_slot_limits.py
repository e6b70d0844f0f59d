"""A power limit per slot (:mod:`tessera.sim.carbon_slot_limits`): the hull, a hand-computed
plan, and never more carbon than one limit per job (issue 34, 3c)."""

from __future__ import annotations

import random
from datetime import datetime

import numpy as np
import pytest

from tessera.model.gpus import resolve_flavor
from tessera.sim.carbon_shift import SLOT_S, ShiftJob, run_shift
from tessera.sim.carbon_slot_limits import hull_steps, plan_per_slot
from tessera.workload.carbon import CarbonTrace


def test_hull_drops_levels_above_it_and_duplicates() -> None:
    # (0.5, 150) lies above the line from (0.4, 70) to (1, 200): never worth using.
    steps = hull_steps([(1.0, 200.0), (1.0, 250.0), (0.5, 150.0), (0.4, 70.0)])
    assert [x for s in steps for x in s] == pytest.approx([0.4, 70.0, 0.6, 130.0])


def test_clean_slot_at_full_power_and_part_of_the_dirty_one_at_the_low_limit() -> None:
    steps = hull_steps([(1.0, 196.5), (0.68, 117.5)])
    carbon, energy, finish = plan_per_slot(np.array([100.0, 150.0]), steps, 1.5, 2, 0.0)
    # Clean slot: both increments (117.5 + 79 W); dirty slot: 0.5 of 0.68 at 117.5 W.
    assert carbon == pytest.approx(100 * 196.5 + 150 * 117.5 * 0.5 / 0.68)
    assert energy == pytest.approx(196.5 + 117.5 * 0.5 / 0.68)
    assert finish == 2


def test_a_price_on_delay_keeps_the_plan_early() -> None:
    steps = hull_steps([(1.0, 196.5), (0.68, 117.5)])
    ci = np.array([300.0, 300.0, 100.0])
    assert plan_per_slot(ci, steps, 1.0, 1, 0.0)[2] == 3  # waits for the clean slot
    assert plan_per_slot(ci, steps, 1.0, 1, 1e6)[2] == 1  # delay too dear: runs at once


def test_per_slot_limits_never_emit_more_than_one_limit_per_job() -> None:
    rng = random.Random(1)
    n = 400
    trace = CarbonTrace("r", datetime(2020, 1, 1), np.arange(n) * SLOT_S,
                        np.array([rng.uniform(50, 400) for _ in range(n)]), n * SLOT_S)
    jobs = [ShiftJob(f"j{i}", rng.uniform(0, 200) * SLOT_S, rng.choice([1800.0, 7200.0,
                     4 * 3600.0]), rng.choice([1, 4]), max_delay_s=12 * 3600.0)
            for i in range(40)]
    v100 = resolve_flavor("v100")
    per_job = run_shift(jobs, trace, "carbon-price", v100)
    per_slot = run_shift(jobs, trace, "carbon-price", v100, slot_limits=True)
    assert per_slot.carbon_kg <= per_job.carbon_kg + 1e-9
    assert per_slot.carbon_kg < per_job.carbon_kg  # (random intensities: it does better)
