"""The capacity-free bound holds for the finite cluster simulator's schedules (issue 34, 3c;
:func:`tessera.sim.carbon_frontier.cluster_bound`)."""

from __future__ import annotations

import random
from datetime import datetime

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.carbon_frontier import cluster_bound
from tessera.sim.config import SimConfig
from tessera.sim.energy_result import with_result_carbon
from tessera.sim.engine import simulate
from tessera.workload.carbon import CarbonTrace
from tests.builders import RESNET, make_cluster, make_job, make_workload

S = 1800.0
V100 = resolve_flavor("v100")
RATES = {g: default_throughputs().throughput(RESNET, V100, g) for g in (1, 2)}


def _trace(*g_per_kwh: float) -> CarbonTrace:
    n = len(g_per_kwh)
    return CarbonTrace("t", datetime(2020, 1, 1), np.arange(n) * S,
                       np.array(g_per_kwh, dtype=float), n * S)


@pytest.mark.parametrize(("mode", "eta", "price"), [
    (None, None, 0.0), ("carbon-time", None, 0.0), ("wait-awhile", None, 0.0),
    ("ours", 1.0, 0.0), ("ours", 1.0, 20.0), ("ours", None, 0.0)])
def test_no_cluster_schedule_beats_the_bound(mode: str | None, eta: float | None,
                                            price: float) -> None:
    rng = random.Random(3)
    trace = _trace(*(rng.uniform(50, 500) for _ in range(160)))
    specs = []
    for i in range(16):
        gpus, slots = rng.choice((1, 2)), rng.choice((1, 2, 4))
        specs.append(make_job(f"j{i}", gpus=gpus, steps=RATES[gpus] * slots * S,
                              submit_s=rng.uniform(0, 30 * S),
                              max_delay_s=rng.choice((2 * S, 4 * S, 12 * S)),
                              requires_locality=True))
    specs.sort(key=lambda j: j.submit_time_s)
    cluster = make_cluster().node("v100", gpus=4).node("v100", gpus=4).build()
    cfg = SimConfig(scheduler=SchedulerSettings(mode="events"), carbon_shift=mode,
                    carbon_trace=trace, carbon_price_g_per_gpu_h=price, zeus_eta=eta)
    r = with_result_carbon(simulate(make_workload(*specs), cluster, "fifo", cfg), trace)
    e = r.energy
    assert e is not None and e.carbon_kg is not None and e.jobs_carbon_kg is not None
    idle_kg = trace.carbon_g(e.times_s, e.power_w * 0 + e.idle_power_kw * 1e3) / 1e3
    by_id = {j.job_id: j for j in specs}
    waits = []
    for rec in r.jobs:
        spec = by_id[rec.job_id]
        length = spec.total_steps / RATES[spec.num_gpus]
        assert rec.finish_s is not None
        assert rec.finish_s <= spec.submit_time_s + length + (spec.max_delay_s or 0) + 1e-6
        waits.append(rec.finish_s - spec.submit_time_s - length)
    jobs = [(j.submit_time_s, j.total_steps / RATES[j.num_gpus], j.num_gpus,
             j.max_delay_s or 0.0) for j in specs]
    avg = float(np.mean(waits))
    above = cluster_bound(jobs, trace, V100, avg)
    gaia = cluster_bound(jobs, trace, V100, avg, count="gaia")
    assert 0 < above <= (e.carbon_kg - idle_kg) * (1 + 1e-6)
    assert above < gaia <= e.jobs_carbon_kg * (1 + 1e-6)


def test_lengths_must_be_whole_slots() -> None:
    with pytest.raises(SpecError, match="not a whole number"):
        cluster_bound([(0.0, 1000.0, 1, 0.0)], _trace(1.0, 1.0, 1.0), V100, 0.0)
