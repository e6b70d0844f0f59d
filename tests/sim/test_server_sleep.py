"""Idle servers powered down (:mod:`tessera.sim.server_sleep`) and GAIA's per-job carbon count
(:mod:`tessera.sim.energy`), against figures computed by hand (issue 34, 3c)."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.energy_result import with_result_carbon
from tessera.sim.engine import simulate
from tessera.workload.carbon import CarbonTrace
from tests.builders import RESNET, make_cluster, make_job, make_workload

V100F = resolve_flavor("v100")
RATE = default_throughputs().throughput(RESNET, V100F)
PM = default_power_model()
BUSY_W = PM.estimate(RESNET, None, V100F).avg_power_w
IDLE_W = PM.idle_power_w(V100F)
EVENTS = SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events")


def _cfg(**kw: object) -> SimConfig:
    return SimConfig(scheduler=EVENTS, **kw)  # type: ignore[arg-type]


def _trace(*steps: tuple[float, float]) -> CarbonTrace:
    """A trace of ``(from_s, g/kWh)`` steps, ending at 10,000 s."""
    return CarbonTrace("t", datetime(2020, 1, 1), np.array([t for t, _ in steps]),
                       np.array([g for _, g in steps]), 10_000.0)


def test_gaia_count_charges_each_job_its_full_draw_where_it_runs() -> None:
    # Two 1-GPU servers; a runs 0-100 s, b 200-300 s: the cluster spans 0-300 s.
    c = make_cluster().node("v100", gpus=1, count=2).build()
    w = make_workload(make_job("a", steps=RATE * 100), make_job("b", steps=RATE * 100,
                                                                 submit_s=200))
    trace = _trace((0.0, 100.0), (150.0, 400.0))
    r = with_result_carbon(simulate(w, c, "fifo", _cfg()), trace)
    e = r.energy
    assert e is not None and e.jobs_carbon_kg is not None and e.carbon_kg is not None
    # GAIA: a's 100 s at 100 g/kWh + b's 100 s at 400 g/kWh, each at the full busy draw.
    assert e.jobs_carbon_kg * 1e3 == pytest.approx(BUSY_W * 100 * (100 + 400) / 3.6e6)
    # The cluster: 2 GPUs over 300 s; busy ones at BUSY_W, the rest idle.
    cluster_g = ((BUSY_W + IDLE_W) * 100 * 100 + 2 * IDLE_W * 50 * 100
                 + 2 * IDLE_W * 50 * 400 + (BUSY_W + IDLE_W) * 100 * 400) / 3.6e6
    assert e.carbon_kg * 1e3 == pytest.approx(cluster_g)
    assert r.as_dict()["jobs_carbon_kg"] == pytest.approx(e.jobs_carbon_kg)


def test_an_idle_server_sleeps_and_the_next_job_waits_for_its_resume() -> None:
    # One 1-GPU server; a runs 0-100 s; the server is idle from 100 s, suspended from
    # 100 + 600 = 700 s; b comes at 1,000 s, holds the GPU from 1,000 s and progresses
    # from 1,000 + 300 s for 100 s.
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("a", steps=RATE * 100),
                      make_job("b", steps=RATE * 100, submit_s=1000))
    r = simulate(w, c, "fifo", _cfg(suspend_after_s=600, resume_s=300, off_power_w=5))
    a, b = r.jobs
    assert a.finish_s == pytest.approx(100)
    assert b.finish_s == pytest.approx(1400)
    e = r.energy
    assert e is not None
    # Busy 0-100 and 1,000-1,400 (the resume is booked at the job's draw); idle 100-700;
    # off 700-1,000.
    expected_j = BUSY_W * (100 + 400) + IDLE_W * 600 + 5 * 300
    assert e.energy_kwh * 3.6e6 == pytest.approx(expected_j)
    assert r.extras["server_resumes"] == 1


def test_without_sleep_the_same_run_is_idle_not_off() -> None:
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("a", steps=RATE * 100),
                      make_job("b", steps=RATE * 100, submit_s=1000))
    r = simulate(w, c, "fifo", _cfg())
    assert r.jobs[1].finish_s == pytest.approx(1100)
    assert r.energy is not None
    assert r.energy.energy_kwh * 3.6e6 == pytest.approx(BUSY_W * 200 + IDLE_W * 900)


def test_a_server_idle_less_than_the_suspend_time_starts_at_once() -> None:
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("a", steps=RATE * 100),
                      make_job("b", steps=RATE * 100, submit_s=500))
    r = simulate(w, c, "fifo", _cfg(suspend_after_s=600, resume_s=300))
    assert r.jobs[1].finish_s == pytest.approx(600)
    assert r.energy is not None
    assert r.energy.energy_kwh * 3.6e6 == pytest.approx(BUSY_W * 200 + IDLE_W * 400)


def test_a_gang_waits_one_resume_and_servers_never_used_stay_off() -> None:
    # Three 1-GPU servers; a 2-GPU job at 1,000 s wakes two of them (one resume, in
    # parallel), the third sleeps from 600 s to the end.
    c = make_cluster().node("v100", gpus=1, count=3).build()
    w = make_workload(make_job("z", steps=RATE * 10),  # (the span starts at 0)
                      make_job("a", gpus=2, steps=RATE * 200 * 2, submit_s=1000))
    r = simulate(w, c, "fifo", _cfg(suspend_after_s=600, resume_s=300, off_power_w=0))
    a = r.jobs[1]
    assert r.energy is not None and a.finish_s is not None
    run_s = a.finish_s - 1300  # its run after the resume
    assert run_s > 0
    # z: 0-10 s on one server; that server idle 10-610 s, off 610-1,000 s; the other two
    # idle 0-600 s, off to 1,000 s (a's two) or to the end (the third).
    end = a.finish_s
    idle_j = IDLE_W * (600 + 600 + 600)
    busy_j = BUSY_W * 10 + 2 * BUSY_W * (end - 1000)
    a_energy = r.energy.energy_kwh * 3.6e6
    assert a_energy == pytest.approx(idle_j + busy_j, rel=1e-6)


def test_bad_sleep_settings_are_clear_errors() -> None:
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("a", steps=RATE * 10))
    with pytest.raises(SpecError, match="off power 500 W per GPU is above the idle power"):
        simulate(w, c, "fifo", _cfg(suspend_after_s=60, off_power_w=500))
    with pytest.raises(ValueError, match="suspend_after_s"):
        _cfg(suspend_after_s=-1)
