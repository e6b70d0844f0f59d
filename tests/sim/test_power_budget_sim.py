"""Power budgets in the simulator (issue 34, part 3a): the cluster stays under the budget at
every event, jobs run slower at their limit, and without a budget nothing changes."""

from __future__ import annotations

import pytest

from tessera.model.cluster import load_cluster
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.power_budget import levels_for
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator, simulate
from tessera.sim.metrics import SimResult
from tessera.workload.synth import generate_gavel_like
from tests.builders import RESNET, make_cluster, make_job, make_workload

CLUSTER = "v100:4,p100:4,k80:4"


def _run(policy: str, seed: int, cfg: SimConfig) -> Simulator:
    wl = generate_gavel_like(40, 6.0, seed=seed)
    sim = Simulator(wl, load_cluster(CLUSTER, 2), make_policy(policy), cfg,
                    default_throughputs())
    result = sim.run()
    if cfg.power_budget_kw is not None:  # (the result's energy book agrees with the budget)
        assert result.energy is not None
        assert result.energy.peak_power_kw <= cfg.power_budget_kw + 1e-9
    return sim


@pytest.mark.parametrize(("policy", "seed", "mode"), [
    ("fifo", 1, "flow"), ("las", 2, "uniform"), ("las", 4, "exact+wait"),
    pytest.param("hetero_srpt", 3, "flow", marks=pytest.mark.slow),
    pytest.param("las", 5, "flow", marks=pytest.mark.slow),
    pytest.param("fifo", 6, "uniform", marks=pytest.mark.slow),
])
def test_power_stays_under_budget_at_every_event(policy: str, seed: int, mode: str) -> None:
    free = _run(policy, seed, SimConfig(seed=seed, power_budget_kw=1e6))
    peak_w = free.world.power.peak_w  # type: ignore[union-attr]
    budget_kw = 0.7 * peak_w / 1e3
    mode, _, wait = mode.partition("+")  # "+wait": starts may wait for a fast board
    sim = _run(policy, seed, SimConfig(seed=seed, power_budget_kw=budget_kw,
                                       power_capping=mode,  # type: ignore[arg-type]
                                       power_wait_fast=bool(wait)))
    trace = sim.world.power.trace  # type: ignore[union-attr]
    assert len(trace) > 20
    assert max(w for _t, w in trace) <= budget_kw * 1e3 + 1e-6
    assert all(j.finish_s is not None for j in sim.world.jobs)


def test_a_never_binding_budget_changes_no_result() -> None:
    wl = generate_gavel_like(40, 6.0, seed=4)
    cl = load_cluster(CLUSTER, 2)
    plain = simulate(wl, cl, "las", SimConfig(seed=4))
    loose = simulate(wl, cl, "las", SimConfig(seed=4, power_budget_kw=1e6))
    assert loose.summary == plain.summary
    assert loose.energy is not None and plain.energy is not None
    assert loose.energy.energy_kwh == pytest.approx(plain.energy.energy_kwh, rel=1e-12)
    assert loose.energy.peak_power_kw == pytest.approx(plain.energy.peak_power_kw, rel=1e-12)
    # one name per quantity: the peak is the energy summary's, the extras carry the budget
    assert loose.extras["power_budget_kw"] == 1e6 and "power_peak_kw" not in loose.extras
    assert "jobs_energy_kwh" not in loose.extras


def test_a_binding_budget_books_capped_draw_in_energy_and_peak() -> None:
    """Under a budget that binds, the result's energy summary counts each capped job at its
    capped draw: its peak stays under the budget and a step costs less energy than uncapped
    (the estimated model's GAMMA < 1: a cap saves more power than it costs time)."""
    wl = generate_gavel_like(40, 6.0, seed=4)
    cl = load_cluster(CLUSTER, 2)
    free = simulate(wl, cl, "fifo", SimConfig(seed=4))
    assert free.energy is not None
    budget_kw = 0.7 * free.energy.peak_power_kw
    capped = simulate(wl, cl, "fifo", SimConfig(seed=4, power_budget_kw=budget_kw))
    assert capped.energy is not None
    assert capped.energy.peak_power_kw <= budget_kw + 1e-9
    assert free.energy.peak_power_kw > budget_kw  # (the budget did bind)

    def busy_kwh_per_step(r: SimResult) -> float:
        steps = sum(j.total_steps for j in wl.jobs)
        return sum(j.energy_kwh or 0.0 for j in r.jobs) / steps

    assert all(j.finish_s is not None for r in (free, capped) for j in r.jobs)
    assert busy_kwh_per_step(capped) < busy_kwh_per_step(free)


def test_a_capped_job_runs_slower_by_its_step_time_factor() -> None:
    """One job alone on one V100 under a budget that fits its lowest limit only: the extra
    10,000 steps of a longer job take ``factor`` times as long as uncapped (the start-up
    cost, the same for both, cancels out)."""
    cl = make_cluster().node("v100", gpus=1).build()
    model = default_power_model()
    v100 = cl.nodes[0].flavor
    lo = model.limit_range(v100).min_w

    def jct_s(steps: float, budget_kw: float | None) -> float:
        wl = make_workload(make_job("a", steps=steps))
        return simulate(wl, cl, "fifo", SimConfig(power_budget_kw=budget_kw)).summary.avg_jct_s

    step_w = model.limit_range(v100).step_w
    # a budget of ``lo`` watts fits the job at the lowest limit and not one step above it
    assert (model.estimate("", None, v100, lo).avg_power_w <= lo
            < model.estimate("", None, v100, lo + step_w).avg_power_w)
    factor = model.estimate("", None, v100, lo).step_time_factor
    assert factor > 1.1
    free_s = jct_s(20_000, None) - jct_s(10_000, None)
    capped_s = jct_s(20_000, lo / 1e3) - jct_s(10_000, lo / 1e3)
    assert capped_s == pytest.approx(free_s * factor, rel=1e-9)


def test_a_job_speeds_up_when_a_stop_frees_power() -> None:
    """Two jobs on two V100s, a third (two GPUs) waiting behind them, under a budget that
    fits both only with one of them one step below its maximum: while a job waits the long
    one is capped (shortest remaining work keeps full power), and when the short one ends
    the long one is lifted back to full speed at that instant."""
    cl = make_cluster().node("v100", gpus=1, count=2).build()
    model = default_power_model()
    v100 = cl.nodes[0].flavor
    lims, draws, speeds = levels_for(model).of_key((RESNET, None, v100))
    budget_w = draws[0] + draws[1] + 1e-6
    assert budget_w < 2 * draws[0]

    def alone_s(steps: float) -> float:
        wl = make_workload(make_job("x", steps=steps))
        return simulate(wl, cl, "fifo", SimConfig()).summary.avg_jct_s

    per_step_s = (alone_s(20_000) - alone_s(10_000)) / 10_000
    startup_s = alone_s(10_000) - 10_000 * per_step_s
    factor = 1.0 / speeds[1]
    assert model.estimate(RESNET, None, v100, lims[1]).step_time_factor == pytest.approx(factor)
    wl = make_workload(make_job("a", steps=5_000), make_job("b", steps=20_000),
                       make_job("c", gpus=2, steps=100))
    sim = Simulator(wl, cl, make_policy("fifo"), SimConfig(power_budget_kw=budget_w / 1e3),
                    default_throughputs())
    sim.run()
    a, b, _c = sim.world.jobs
    a_end_s = startup_s + 5_000 * per_step_s  # the short job: full power throughout
    assert a.finish_s == pytest.approx(a_end_s, rel=1e-9)
    b_done = (a_end_s - startup_s) / (per_step_s * factor)
    assert b.finish_s == pytest.approx(a_end_s + (20_000 - b_done) * per_step_s, rel=1e-9)
    assert max(w for _t, w in sim.world.power.trace) <= budget_w + 1e-9  # type: ignore[union-attr]
