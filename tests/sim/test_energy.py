"""Energy in every simulation, against hand-computed figures (issue 34, part 1)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.energy_result import with_result_carbon
from tessera.sim.engine import simulate
from tessera.workload.carbon import CarbonTrace, parse_carbon
from tests.builders import RESNET, make_cluster, make_job, make_workload

T = default_throughputs()
V100F = resolve_flavor("v100")
V100 = T.throughput(RESNET, V100F)
NO_COST = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events"))
PM = default_power_model()
BUSY_W = PM.estimate(RESNET, None, V100F).avg_power_w
IDLE_W = PM.idle_power_w(V100F)


def test_one_job_energy_is_busy_power_times_time_plus_idle_gpus() -> None:
    c = make_cluster().node("v100", gpus=2).build()
    r = simulate(make_workload(make_job("a", steps=V100 * 1000)), c, "fifo", NO_COST)
    e = r.energy
    assert e is not None
    # 1000 s: one GPU busy, one idle.
    assert e.energy_kwh == pytest.approx((BUSY_W + IDLE_W) * 1000 / 3.6e6)
    assert e.peak_power_kw == pytest.approx((BUSY_W + IDLE_W) / 1e3)
    assert e.avg_power_kw == pytest.approx((BUSY_W + IDLE_W) / 1e3)
    assert e.idle_power_kw == pytest.approx(2 * IDLE_W / 1e3)
    assert r.jobs[0].energy_kwh == pytest.approx(BUSY_W * 1000 / 3.6e6)
    assert e.power_sources == ("estimated:tdp-fit",)


def test_peak_and_average_follow_the_power_steps() -> None:
    c = make_cluster().node("v100", gpus=2).build()
    w = make_workload(make_job("a", steps=V100 * 100),
                      make_job("b", steps=V100 * 100, submit_s=50))
    r = simulate(w, c, "fifo", NO_COST)
    e = r.energy
    assert e is not None
    # 0-50 s: a busy; 50-100 s: both; 100-150 s: b busy. Span 150 s.
    busy_j = 2 * BUSY_W * 100
    idle_j = IDLE_W * 100  # one GPU idle over 0-50 s and 100-150 s
    assert e.energy_kwh == pytest.approx((busy_j + idle_j) / 3.6e6)
    assert e.peak_power_kw == pytest.approx(2 * BUSY_W / 1e3)
    assert e.avg_power_kw == pytest.approx((busy_j + idle_j) / 150 / 1e3)
    assert [j.energy_kwh for j in r.jobs] == pytest.approx([BUSY_W * 100 / 3.6e6] * 2)


def test_json_metrics_carry_energy_and_the_series() -> None:
    c = make_cluster().node("v100", gpus=1).build()
    d = simulate(make_workload(make_job("a", steps=V100 * 100)), c, "fifo", NO_COST).as_dict()
    for key in ("energy_kwh", "avg_power_kw", "peak_power_kw", "carbon_kg", "power_series"):
        assert key in d
    assert d["carbon_kg"] is None
    json.dumps(d)  # (all of it serialisable)


def test_carbon_is_power_times_intensity(tmp_path: Path) -> None:
    # 100 g/kWh for the first 60 s, then 300 g/kWh.
    csv = tmp_path / "ci.csv"
    csv.write_text("Time,Carbon Intensity\n2020-01-01 00:00:00,100\n2020-01-01 00:01:00,300\n"
                   "2020-01-01 00:02:00,300\n")
    trace = parse_carbon(csv, "test")
    c = make_cluster().node("v100", gpus=1).build()
    r = with_result_carbon(
        simulate(make_workload(make_job("a", steps=V100 * 100)), c, "fifo", NO_COST), trace)
    assert r.energy is not None
    expected_g = BUSY_W / 3.6e6 * (60 * 100 + 40 * 300)
    assert r.energy.carbon_kg == pytest.approx(expected_g / 1e3)
    assert r.as_dict()["carbon_region"] == "test"


def test_a_carbon_trace_wraps_around() -> None:
    trace = CarbonTrace("w", datetime(2020, 1, 1),
                        np.array([0.0, 10.0]), np.array([1.0, 3.0]), 20.0)
    assert trace.integral(np.array([0.0, 10.0, 20.0, 25.0])) == pytest.approx([0, 10, 40, 45])
    assert trace.at(35.0) == 3.0
