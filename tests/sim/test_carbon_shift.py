"""Carbon-aware shifting and GAIA's baselines on hand-made traces (issue 34, 3c)."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobSpec
from tessera.perf.power_estimate import default_power_model
from tessera.sim.carbon_shift import SLOT_S, ShiftJob, match_wait, run_shift
from tessera.workload.carbon import CarbonTrace

V100 = resolve_flavor("v100")
FULL_W = default_power_model().estimate("", None, V100).avg_power_w


def _trace(*g_per_kwh: float) -> CarbonTrace:
    n = len(g_per_kwh)
    return CarbonTrace("t", datetime(2020, 1, 1), np.arange(n) * SLOT_S,
                       np.array(g_per_kwh, dtype=float), n * SLOT_S)


def _kg(ci_sum: float, gpus: int = 1) -> float:
    return ci_sum * FULL_W * gpus * SLOT_S / 3.6e6 / 1e3


# Dirty now, a little cleaner at once, much cleaner later: Carbon-Time takes the early dip
# (saving per hour of waiting), Wait-Awhile the cleanest slots before the deadline.
TRACE = _trace(400, 300, 400, 400, 100, 100, 400, 400)
JOB = ShiftJob("a", 0.0, 2 * SLOT_S, max_delay_s=4 * SLOT_S)


def test_agnostic_runs_at_once() -> None:
    r = run_shift([JOB], TRACE, "agnostic", V100)
    assert r.carbon_kg == pytest.approx(_kg(700)) and r.avg_wait_s == 0.0


def test_carbon_time_maximises_saving_per_completion_time() -> None:
    # start 0: 700; start 1: 700 → saving 0; start 3: 500, saving 200 over 5 slots = 40;
    # start 4: 200, saving 500 over 6 slots = 83 (the best).
    r = run_shift([JOB], TRACE, "carbon-time", V100)
    assert r.carbon_kg == pytest.approx(_kg(200)) and r.avg_wait_s == 4 * SLOT_S


def test_wait_awhile_suspends_for_the_cleanest_slots_before_the_deadline() -> None:
    job = ShiftJob("a", 0.0, 3 * SLOT_S, max_delay_s=3 * SLOT_S)
    r = run_shift([job], TRACE, "wait-awhile", V100)
    assert r.carbon_kg == pytest.approx(_kg(300 + 100 + 100))  # slots 1, 4, 5
    assert r.avg_wait_s == 3 * SLOT_S  # (finishes after slot 5 instead of slot 2)


def test_ours_never_worse_than_wait_awhile_at_price_zero_and_a_price_cuts_waiting() -> None:
    jobs = [ShiftJob(f"j{i}", i * SLOT_S, SLOT_S * (1 + i % 2), max_delay_s=4 * SLOT_S)
            for i in range(3)]
    trace = _trace(*([400, 300, 400, 400, 100, 100, 400, 400] * 3))
    wa = run_shift(jobs, trace, "wait-awhile", V100)
    free = run_shift(jobs, trace, "carbon-price", V100, 0.0)
    assert free.carbon_kg <= wa.carbon_kg + 1e-12
    uncapped = run_shift(jobs, trace, "carbon-price", V100, 0.0, power_limits=False)
    assert uncapped.carbon_kg == pytest.approx(wa.carbon_kg)  # (both: the cleanest slots)
    flat = _trace(*([100.0] * 30))  # (nothing to shift to: only a lower power limit helps)
    capped = run_shift(jobs, flat, "carbon-price", V100, 0.0)
    assert capped.energy_kwh < 0.9 * run_shift(jobs, flat, "wait-awhile", V100).energy_kwh
    dear = run_shift(jobs, trace, "carbon-price", V100, 1e6)
    assert dear.avg_wait_s == 0.0
    matched = match_wait(jobs, trace, V100, wa.avg_wait_s / 2)
    assert matched.avg_wait_s <= wa.avg_wait_s / 2


def test_no_slack_means_no_shift() -> None:
    job = ShiftJob("a", 0.0, 2 * SLOT_S)
    for policy in ("carbon-time", "wait-awhile"):
        assert run_shift([job], TRACE, policy, V100).carbon_kg == pytest.approx(_kg(700))


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match=r"job a: deadline 100 s is in the past: before "
                                        r"submission \+ length = 4600 s"):
        ShiftJob("a", 1000.0, 3600.0, deadline_s=100.0)
    with pytest.raises(SpecError, match="max_delay_s must be >= 0, got -1"):
        ShiftJob("a", 0.0, 3600.0, max_delay_s=-1.0)
    with pytest.raises(SpecError, match="shift policy 'greedy'"):
        run_shift([JOB], TRACE, "greedy", V100)
    with pytest.raises(SpecError, match="carbon price must be >= 0"):
        run_shift([JOB], TRACE, "carbon-price", V100, -1.0)
    assert ShiftJob("a", 0.0, 3600.0, deadline_s=9000.0).slack_s == 5400.0


def test_jobspec_declares_slack_as_a_typed_field() -> None:
    j = JobSpec("a", "ResNet-50 (batch size 64)", 1, 100.0, 0.0, max_delay_s=3600.0)
    assert j.max_delay_s == 3600.0
    with pytest.raises(SpecError, match=r"job a: max_delay_s must be a number of seconds >= 0"):
        JobSpec("a", "ResNet-50 (batch size 64)", 1, 100.0, 0.0, max_delay_s=float("inf"))
