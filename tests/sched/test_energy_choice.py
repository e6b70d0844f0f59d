"""Energy-aware GPU-type choice and per-job Zeus (issue 34, part 3b)."""

from __future__ import annotations

import math

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.power_estimate import default_power_model
from tessera.sched.catalog import make_policy
from tessera.sched.core.energy_choice import energy_aware
from tessera.sched.core.power_options import ZeusCost
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import make_cluster, make_job, make_workload

MODEL = default_power_model()
V100, K80 = resolve_flavor("v100"), resolve_flavor("k80")
RESNET = "ResNet-18 (batch size 128)"


@pytest.mark.parametrize("eta", [-0.1, 1.5, math.nan])
def test_eta_outside_unit_interval_is_named(eta: float) -> None:
    with pytest.raises(SpecError, match=f"eta must be in \\[0, 1\\], got {eta}"):
        ZeusCost(eta, MODEL, 300.0)


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0])
def test_zeus_limit_is_the_exhaustive_minimum(eta: float) -> None:
    cost = ZeusCost(eta, MODEL, 300.0)
    spec = make_job("a")
    lim, best, _capped = cost.best(spec, V100)
    every = [(MODEL.estimate(spec.job_type, None, V100, w).step_time_factor
              * (eta * MODEL.estimate(spec.job_type, None, V100, w).avg_power_w
                 + (1 - eta) * 300.0), w) for w in MODEL.limit_range(V100).limits_w()]
    assert best == pytest.approx(min(every)[0])
    assert MODEL.estimate(spec.job_type, None, V100, lim).step_time_factor * (
        eta * MODEL.estimate(spec.job_type, None, V100, lim).avg_power_w
        + (1 - eta) * 300.0) == pytest.approx(best)
    if eta == 0.0:  # time alone: never slower than uncapped
        assert MODEL.estimate(spec.job_type, None, V100, lim).step_time_factor == 1.0
    if eta == 1.0:  # energy alone: a lower limit than the maximum
        assert lim < MODEL.limit_range(V100).max_w


def test_energy_aware_keeps_traits_and_refuses_packing() -> None:
    cost = ZeusCost(0.5, MODEL, 300.0)
    las = energy_aware(make_policy("las"), cost)
    assert las.preemptive == make_policy("las").preemptive
    assert las.display_name == "las"
    with pytest.raises(SpecError, match="slack must be >= 0, got -1"):
        energy_aware(make_policy("fifo"), cost, -1.0)


def _two_resnets() -> tuple[float, float, float, float]:
    """One V100 and one K80; two ResNet-18 jobs arrive together. FIFO + per-job Zeus runs
    the second on the K80 (≈10× slower); energy-aware choice has it wait for the V100."""
    cl = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    wl = make_workload(make_job("a", steps=20_000, job_type=RESNET),
                       make_job("b", steps=20_000, job_type=RESNET))
    zeus = simulate(wl, cl, "fifo", SimConfig(zeus_eta=0.5))
    ours = simulate(wl, cl, "fifo", SimConfig(zeus_eta=0.5, energy_types=True))
    return (zeus.extras["zeus_cost_mj"], ours.extras["zeus_cost_mj"],
            zeus.summary.avg_jct_s, ours.summary.avg_jct_s)


def test_type_choice_beats_per_job_zeus_on_cost() -> None:
    zeus_cost, our_cost, zeus_jct, our_jct = _two_resnets()
    assert our_cost < 0.9 * zeus_cost
    assert our_jct < zeus_jct  # waiting for the V100 is also sooner than a K80 run


def test_energy_types_without_zeus_is_refused() -> None:
    cl = make_cluster().node("v100", gpus=1).build()
    with pytest.raises(SpecError, match="needs --zeus-eta"):
        simulate(make_workload(make_job("a")), cl, "fifo", SimConfig(energy_types=True))
    assert K80.tdp_w < V100.tdp_w


def test_per_job_zeus_limits_are_booked_at_the_capped_draw() -> None:
    """With η = 1 (energy only) Zeus caps a lone V100 job; the result's energy books it at
    the draw of that limit for its whole run (one energy book with the limits), and Zeus's
    cost is η·that energy."""
    cl = make_cluster().node("v100", gpus=1).build()
    job = make_job("a", steps=20_000, job_type=RESNET)
    r = simulate(make_workload(job), cl, "fifo", SimConfig(zeus_eta=1.0))
    lim, _cost, capped = ZeusCost(1.0, MODEL, MODEL.limit_range(V100).max_w).best(job, V100)
    assert capped
    (rec,) = r.jobs
    assert rec.finish_s is not None and rec.first_start_s is not None
    capped_w = MODEL.estimate(RESNET, None, V100, lim).avg_power_w
    assert capped_w < MODEL.estimate(RESNET, None, V100).avg_power_w
    run_s = rec.finish_s - rec.first_start_s
    assert rec.energy_kwh == pytest.approx(capped_w * run_s / 3.6e6, rel=1e-9)
    assert r.extras["zeus_cost_mj"] == pytest.approx(capped_w * run_s / 1e6, rel=1e-9)
    assert r.energy is not None
    assert r.energy.peak_power_kw == pytest.approx(capped_w / 1e3, rel=1e-9)
