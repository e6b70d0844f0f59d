"""The JCT lower bound under a power budget (issue 34, part 3a): SRPT's sum on one machine,
and a bound no simulated schedule beats."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError
from tessera.model.cluster import load_cluster
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.power_bound import binding_fraction, jct_lower_bound, srpt_sum_s
from tessera.workload.synth import generate_gavel_like

CLUSTER = "v100:4,p100:4,k80:4"


def test_srpt_sum_preempts_for_the_shorter_job() -> None:
    assert srpt_sum_s([(0.0, 2.0), (0.0, 1.0)]) == pytest.approx(1.0 + 3.0)
    # at t=1 the long job has 2 left, the new one 1: the new one runs first
    assert srpt_sum_s([(0.0, 3.0), (1.0, 1.0)]) == pytest.approx(2.0 + 4.0)
    assert srpt_sum_s([(5.0, 2.0)], rate=2.0) == pytest.approx(6.0)
    with pytest.raises(SpecError, match="rate must be > 0, got 0"):
        srpt_sum_s([(0.0, 1.0)], rate=0.0)


def test_binding_fraction_counts_time_over_the_budget() -> None:
    assert binding_fraction([0.0, 1.0, 3.0], [5.0, 10.0, 5.0], 4.0, 8.0) == pytest.approx(0.5)
    assert binding_fraction([], [], 4.0, 8.0) == 0.0


@pytest.mark.parametrize("mode", ["flow", "uniform"])
def test_no_schedule_beats_the_bound(mode: str) -> None:
    cluster = load_cluster(CLUSTER, 2)
    model, tputs = default_power_model(), default_throughputs()
    wl = generate_gavel_like(40, 6.0, seed=3)
    free = simulate(wl, cluster, "fifo", SimConfig(seed=3))
    assert free.energy is not None
    budget_kw = 0.7 * free.energy.peak_power_kw
    capped = simulate(wl, cluster, "fifo", SimConfig(seed=3, power_budget_kw=budget_kw,
                                                     power_capping=mode))
    lb = jct_lower_bound(wl.jobs, cluster, model, tputs, budget_kw * 1e3)
    lb_free = jct_lower_bound(wl.jobs, cluster, model, tputs, None)
    assert lb_free.avg_jct_s <= free.summary.avg_jct_s
    assert lb_free.avg_jct_s <= lb.avg_jct_s <= capped.summary.avg_jct_s
    tighter = jct_lower_bound(wl.jobs, cluster, model, tputs, 0.5 * budget_kw * 1e3)
    assert tighter.avg_jct_s >= lb.avg_jct_s


def test_a_budget_under_the_idle_draw_is_named() -> None:
    cluster = load_cluster(CLUSTER, 2)
    wl = generate_gavel_like(3, 6.0, seed=1)
    with pytest.raises(SpecError, match="at or below the idle cluster"):
        jct_lower_bound(wl.jobs, cluster, default_power_model(), default_throughputs(), 1.0)


def test_a_bound_over_no_jobs_is_named() -> None:
    """It divided by zero."""
    cluster = load_cluster("v100:2")
    with pytest.raises(SpecError, match="at least one job"):
        jct_lower_bound([], cluster, default_power_model(), default_throughputs(), None)
