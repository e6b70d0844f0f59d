"""The LP lower bound on carbon at a given average wait (issue 34, 3c; sim/carbon_bound.py)."""

from __future__ import annotations

import random
from datetime import datetime

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.sim.carbon_bound import BoundJob, bound_lp, carbon_lower_bound
from tessera.sim.carbon_shift import SLOT_S, ShiftJob, run_shift
from tessera.workload.carbon import CarbonTrace

V100 = resolve_flavor("v100")
G_PER = SLOT_S / 3.6e6  # grams per (g/kWh × W × slot)


def _trace(*g_per_kwh: float) -> CarbonTrace:
    n = len(g_per_kwh)
    return CarbonTrace("t", datetime(2020, 1, 1), np.arange(n) * SLOT_S,
                       np.array(g_per_kwh, dtype=float), n * SLOT_S)


def test_one_job_full_power_only_by_hand() -> None:
    # One slot of work, a dirty slot (100) then a clean one (10), 200 W: at once 100 × 200,
    # one slot later 10 × 200; at half a slot of wait the relaxation finishes "half at each"
    # (the mean: a lower bound, below the 100 × 200 any real schedule without waiting has).
    ci = np.array([100.0, 10.0])
    job = [BoundJob(0, 1, 2)]
    assert bound_lp(ci, job, [(1.0, 200.0)], 0.0)[0] == pytest.approx(100 * 200 * G_PER)
    assert bound_lp(ci, job, [(1.0, 200.0)], 1.0)[0] == pytest.approx(10 * 200 * G_PER)
    assert bound_lp(ci, job, [(1.0, 200.0)], 0.5)[0] == pytest.approx(55 * 200 * G_PER)


def test_a_low_limit_spread_over_the_wait_by_hand() -> None:
    # Limits (speed 0.5, 80 W) and (1, 200 W): one slot of work in two equal slots. At no wait
    # it runs at full power (100 × 200); with one slot of wait it runs both slots at 80 W
    # (2 × 100 × 80 = 16,000 < 20,000), the hull's cheapest step.
    ci = np.array([100.0, 100.0])
    job = [BoundJob(0, 1, 2)]
    steps = [(0.5, 80.0), (0.5, 120.0)]
    assert bound_lp(ci, job, steps, 0.0)[0] == pytest.approx(100 * 200 * G_PER)
    carbon, energy = bound_lp(ci, job, steps, 1.0)
    assert carbon == pytest.approx(2 * 100 * 80 * G_PER)
    assert energy == pytest.approx(2 * 80 * SLOT_S)


def test_the_wait_budget_goes_where_it_saves_most() -> None:
    # Two jobs, one slot of wait between them: job 0 saves 90 by waiting a slot, job 1 saves
    # 10, so the budget (0.5 slot on average = 1 slot in all) goes to job 0.
    ci = np.array([100.0, 10.0, 0.0, 50.0, 40.0])
    jobs = [BoundJob(0, 1, 2), BoundJob(3, 1, 5)]
    carbon, _ = bound_lp(ci, jobs, [(1.0, 1.0)], 0.5)
    assert carbon == pytest.approx((10 + 50) * G_PER)


def _random_case(seed: int) -> tuple[list[ShiftJob], CarbonTrace]:
    rng = random.Random(seed)
    trace = _trace(*(rng.uniform(50, 400) for _ in range(80)))
    jobs = [ShiftJob(f"j{i}", rng.uniform(0, 20) * SLOT_S, rng.choice((1, 2, 3, 5)) * SLOT_S,
                     rng.choice((1, 2, 4)), max_delay_s=rng.choice((0, 2, 6, 12)) * SLOT_S)
            for i in range(12)]
    return jobs, trace


@pytest.mark.parametrize("seed", range(4))
def test_no_simulated_mode_beats_the_bound(seed: int) -> None:
    jobs, trace = _random_case(seed)
    runs = [run_shift(jobs, trace, p, V100) for p in ("agnostic", "carbon-time", "wait-awhile")]
    for price in (0.0, 3.0, 30.0, 300.0):
        for slot_limits in (False, True):
            runs.append(run_shift(jobs, trace, "carbon-price", V100, price,
                                  slot_limits=slot_limits))
    for r in runs:
        b = carbon_lower_bound(jobs, trace, V100, r.avg_wait_s)
        assert b.carbon_kg <= r.carbon_kg * (1 + 1e-7), (r, b)
    # And the bound is attained where the relaxation has nothing to relax: with no wait
    # allowed, every job runs at once, at full power (the hull's top is full power).
    agn = runs[0]
    assert carbon_lower_bound(jobs, trace, V100, 0.0).carbon_kg == pytest.approx(agn.carbon_kg)


def test_above_idle_counts_less_than_the_full_draw() -> None:
    jobs, trace = _random_case(0)
    full = carbon_lower_bound(jobs, trace, V100, 2 * SLOT_S)
    above = carbon_lower_bound(jobs, trace, V100, 2 * SLOT_S, count="above-idle")
    assert 0 < above.carbon_kg < full.carbon_kg


def test_bad_input_is_a_clear_error() -> None:
    jobs, trace = _random_case(0)
    with pytest.raises(SpecError, match="average wait must be >= 0"):
        carbon_lower_bound(jobs, trace, V100, -1.0)
    with pytest.raises(SpecError, match="count 'cluster'"):
        carbon_lower_bound(jobs, trace, V100, 0.0, count="cluster")
    with pytest.raises(SpecError, match="no jobs"):
        carbon_lower_bound([], trace, V100, 0.0)
    with pytest.raises(SpecError, match="does not fit"):
        bound_lp(np.ones(3), [BoundJob(0, 4, 3)], [(1.0, 1.0)], 0.0)
