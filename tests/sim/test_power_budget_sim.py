"""Power budgets in the simulator (issue 34, part 3a): the cluster stays under the budget at
every event, jobs run slower at their limit, and without a budget nothing changes."""

from __future__ import annotations

import pytest

from tessera.model.cluster import load_cluster
from tessera.perf.power_tdp import TdpPowerModel
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator, simulate
from tessera.workload.synth import generate_gavel_like
from tests.builders import make_cluster, make_job, make_workload

CLUSTER = "v100:4,p100:4,k80:4"


def _run(policy: str, seed: int, cfg: SimConfig) -> Simulator:
    wl = generate_gavel_like(40, 6.0, seed=seed)
    sim = Simulator(wl, load_cluster(CLUSTER, 2), make_policy(policy), cfg,
                    default_throughputs())
    sim.run()
    return sim


@pytest.mark.parametrize(("policy", "seed", "mode"), [
    ("fifo", 1, "flow"), ("las", 2, "uniform"),
    pytest.param("hetero_srpt", 3, "flow", marks=pytest.mark.slow),
    pytest.param("las", 5, "flow", marks=pytest.mark.slow),
    pytest.param("fifo", 6, "uniform", marks=pytest.mark.slow),
])
def test_power_stays_under_budget_at_every_event(policy: str, seed: int, mode: str) -> None:
    free = _run(policy, seed, SimConfig(seed=seed, power_budget_kw=1e6))
    peak_w = free.world.power.peak_w  # type: ignore[union-attr]
    budget_kw = 0.7 * peak_w / 1e3
    sim = _run(policy, seed, SimConfig(seed=seed, power_budget_kw=budget_kw,
                                       power_capping=mode))  # type: ignore[arg-type]
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
    assert "power_peak_kw" in loose.extras and "power_peak_kw" not in plain.extras


def test_a_capped_job_runs_slower_by_its_step_time_factor() -> None:
    """One job alone on one V100 under a budget that fits its lowest limit only: the extra
    10,000 steps of a longer job take ``factor`` times as long as uncapped (the start-up
    cost, the same for both, cancels out)."""
    cl = make_cluster().node("v100", gpus=1).build()
    model = TdpPowerModel()
    v100 = cl.nodes[0].flavor
    lo = model.limit_range(v100).min_w

    def jct_s(steps: float, budget_kw: float | None) -> float:
        wl = make_workload(make_job("a", steps=steps))
        return simulate(wl, cl, "fifo", SimConfig(power_budget_kw=budget_kw)).summary.avg_jct_s

    factor = model.estimate("", None, v100, lo).step_time_factor
    assert factor > 1.1
    free_s = jct_s(20_000, None) - jct_s(10_000, None)
    capped_s = jct_s(20_000, lo / 1e3) - jct_s(10_000, lo / 1e3)
    assert capped_s == pytest.approx(free_s * factor, rel=1e-9)
