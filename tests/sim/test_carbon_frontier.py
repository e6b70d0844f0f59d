"""Carbon by finish slot, the Lagrangian bound and the priced schedule (sim/carbon_frontier.py)."""

from __future__ import annotations

import random
from datetime import datetime

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.power_estimate import default_power_model
from tessera.sim.carbon_bound import BoundJob, carbon_lower_bound
from tessera.sim.carbon_frontier import (
    bound_and_schedule,
    dual_bound,
    finish_frontier,
    frontier_of,
    priced_schedule,
    study_frontier,
)
from tessera.sim.carbon_shift import SLOT_S, ShiftJob, _levels, run_shift
from tessera.workload.carbon import CarbonTrace

V100 = resolve_flavor("v100")
G_PER = SLOT_S / 3.6e6


def _trace(*g_per_kwh: float) -> CarbonTrace:
    n = len(g_per_kwh)
    return CarbonTrace("t", datetime(2020, 1, 1), np.arange(n) * SLOT_S,
                       np.array(g_per_kwh, dtype=float), n * SLOT_S)


def test_frontier_by_hand() -> None:
    # Limits (speed 0.5, 80 W) and (1, 200 W); one slot of work in slots at 100 and 80 g/kWh,
    # 2 GPUs. Finish after slot 0: full power there, 100 × 200. After slot 1: the increments
    # cost 80 × 160, 100 × 160, 80 × 240, 100 × 240 per unit; the first two hold the work:
    # 0.5 × (12,800 + 16,000) = 14,400, i.e. 80 W in both slots (full power in the cleaner
    # slot alone would be 80 × 200 = 16,000).
    carbon, energy = finish_frontier(np.array([100.0, 80.0]), [(0.5, 80.0), (0.5, 120.0)], 1, 2)
    assert carbon == pytest.approx([2 * 20_000 * G_PER, 2 * 14_400 * G_PER])
    assert energy == pytest.approx([2 * 200 * SLOT_S, 2 * 160 * SLOT_S])


def test_bound_and_schedule_by_hand() -> None:
    # Job 0 saves 90 by waiting one slot, job 1 saves 10: one slot of wait in all goes to
    # job 0 (the bound is then attained by a real schedule).
    ci = np.array([100.0, 10.0, 0.0, 50.0, 40.0])
    front = frontier_of(ci, [BoundJob(0, 1, 2), BoundJob(3, 1, 5)], [(1.0, 1.0)])
    assert dual_bound(front, 0.5) == pytest.approx((10 + 50) * G_PER)
    carbon, _, wait, _ = priced_schedule(front, 0.5)
    assert carbon == pytest.approx((10 + 50) * G_PER) and wait == pytest.approx(0.5)
    # Half a slot of wait for one job: the integral problem must run at once (100), the
    # bound may not claim less than the mean of the two schedules (55).
    one = frontier_of(ci, [BoundJob(0, 1, 2)], [(1.0, 1.0)])
    assert 55 * G_PER - 1e-9 <= dual_bound(one, 0.5) <= 100 * G_PER + 1e-9
    assert priced_schedule(one, 0.5)[0] == pytest.approx(100 * G_PER)


@pytest.mark.parametrize("seed", range(4))
def test_bound_is_at_least_the_lp_and_below_every_mode(seed: int) -> None:
    rng = random.Random(seed)
    trace = _trace(*(rng.uniform(50, 400) for _ in range(80)))
    jobs = [ShiftJob(f"j{i}", rng.uniform(0, 20) * SLOT_S, rng.choice((1, 2, 3, 5)) * SLOT_S,
                     rng.choice((1, 2, 4)), max_delay_s=rng.choice((0, 2, 6, 12)) * SLOT_S)
            for i in range(12)]
    front = study_frontier(jobs, trace, V100)
    runs = [run_shift(jobs, trace, p, V100) for p in ("agnostic", "carbon-time", "wait-awhile")]
    runs += [run_shift(jobs, trace, "carbon-price", V100, price, slot_limits=sl)
             for price in (0.0, 3.0, 30.0, 300.0) for sl in (False, True)]
    for r in runs:
        best, priced = bound_and_schedule(front, r.avg_wait_s)
        lp = carbon_lower_bound(jobs, trace, V100, r.avg_wait_s)
        assert lp.carbon_kg <= best.carbon_kg * (1 + 1e-6) + 1e-12
        assert best.carbon_kg <= r.carbon_kg * (1 + 1e-7)
        assert best.carbon_kg <= priced.carbon_kg * (1 + 1e-7)
        assert priced.avg_wait_s <= r.avg_wait_s + 1e-6


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match="do not fit"):
        finish_frontier(np.ones(2), [(1.0, 1.0)], 3)
    with pytest.raises(SpecError, match="no jobs"):
        frontier_of(np.ones(2), [], [(1.0, 1.0)])
    front = frontier_of(np.ones(2), [BoundJob(0, 1, 2)], [(1.0, 1.0)])
    with pytest.raises(SpecError, match="average wait must be >= 0"):
        dual_bound(front, -1.0)
    with pytest.raises(SpecError, match="count 'x'"):
        study_frontier([ShiftJob("a", 0.0, SLOT_S)], _trace(1.0, 1.0), V100, count="x")


def test_no_schedule_beats_wait_awhile_by_more_than_the_best_energy_per_work() -> None:
    # Wait-Awhile runs every job in its cleanest slots at full power: the least carbon at
    # full power. Any schedule does each unit of work at >= min_L P(L) / speed(L) (the
    # 125 W limit on the V100: 117.5 W at 0.681 speed = 172.5 W per unit vs 196.5 W), so at
    # ANY wait the best cut against Wait-Awhile is 1 - 172.5 / 196.5 = 12.2 %: below 15 %.
    rng = random.Random(11)
    trace = _trace(*(rng.uniform(50, 400) for _ in range(120)))
    jobs = [ShiftJob(f"j{i}", rng.uniform(0, 40) * SLOT_S, rng.choice((1, 2, 4)) * SLOT_S,
                     rng.choice((1, 8)), max_delay_s=rng.choice((4, 24, 48)) * SLOT_S)
            for i in range(20)]
    wa = run_shift(jobs, trace, "wait-awhile", V100)
    front = study_frontier(jobs, trace, V100)
    far = dual_bound(front, 100.0) / 1e3  # more wait than any job's slack
    levels = _levels(default_power_model(), V100, with_limits=True)
    best_per_work = min(lv.power_w / lv.speed for lv in levels) / levels[0].power_w
    assert best_per_work == pytest.approx(117.5 / 0.681 / 196.5, rel=1e-3)
    assert far >= wa.carbon_kg * best_per_work * (1 - 1e-9)
    assert 1 - far / wa.carbon_kg < 0.15
