"""Zeus per job (issue 34, part 2): the trace reader, the measured power model, the optimiser."""

from __future__ import annotations

import math

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.perf.power import PowerEstimate, PowerLimitRange
from tessera.perf.zeus_opt import (
    default_recurrences,
    exhaustive_best,
    expected,
    jit_power_limit,
    simulate_recurring,
    zeus_choice,
    zeus_cost,
)
from tessera.perf.zeus_table import (
    WORKLOADS,
    ZEUS_GPUS,
    ZeusPowerModel,
    ZeusTable,
    train_rows,
    workload,
)

ETAS = (0.0, 0.25, 0.5, 0.75, 1.0)


def test_tables_read_as_typed_rows() -> None:
    """Every row of the four power tables and the train table, with ``nan`` as ``None``."""
    assert {g: len(ZeusTable.load(g).rows) for g in ZEUS_GPUS} == {
        "v100": 476, "a40": 453, "p100": 270, "rtx6000": 410}
    rows = train_rows()
    assert len(rows) == 3759
    assert any(r.target_epoch is None for r in rows)
    t = ZeusTable.load("V100")
    row = t.power_row(workload("imagenet"), 256, 175)
    assert row.energy_per_epoch_j == pytest.approx(row.time_per_epoch_s * row.avg_power_w)
    assert (t.min_limit_w, t.max_limit_w) == (100, 250)
    assert ZeusTable.load("rtx-6000").max_limit_w == 260


def test_unknown_gpu_workload_or_setting_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match="Zeus measured no GPU 'h100'"):
        ZeusTable.load("h100")
    with pytest.raises(SpecError, match="unknown Zeus workload 'gpt'"):
        workload("gpt")
    with pytest.raises(SpecError, match="batch 7 and 175 W"):
        ZeusTable.load("v100").power_row(workload("imagenet"), 7, 175)


def test_power_model_answers_measured_values() -> None:
    m = ZeusPowerModel()
    v100 = resolve_flavor("v100")
    row = ZeusTable.load("v100").power_row(workload("imagenet"), 256, 175)
    top = ZeusTable.load("v100").power_row(workload("imagenet"), 256, 250)
    est = m.estimate("ResNet-50 (batch size 256)", None, v100, 175, 256)
    assert est == PowerEstimate(row.avg_power_w, row.time_per_epoch_s / top.time_per_epoch_s,
                                True, "zeus:v100")
    # No limit: the highest measured; no batch: Zeus's b0.
    assert m.estimate("x", "imagenet", v100).step_time_factor == 1.0
    assert m.estimate("x", "imagenet", resolve_flavor("V100-32GB")).source == "zeus:v100"
    assert m.limit_range(resolve_flavor("p100")) == PowerLimitRange(125.0, 250.0, 25.0)
    # Between two measured limits: interpolated and marked so.
    mid = m.estimate("x", "imagenet", v100, 187.5, 256)
    lo = m.estimate("x", "imagenet", v100, 175, 256)
    hi = m.estimate("x", "imagenet", v100, 200, 256)
    assert not mid.measured and mid.source == "zeus:v100+interpolated"
    assert mid.avg_power_w == pytest.approx((lo.avg_power_w + hi.avg_power_w) / 2)
    assert m.covers("x", "squad", v100) and not m.covers("x", "gpt3-1.3b", v100)


@pytest.mark.parametrize("limit", [99.0, 251.0, -5.0, math.nan])
def test_power_limit_outside_the_gpus_range_is_an_error_naming_it(limit: float) -> None:
    with pytest.raises(SpecError, match=rf"power limit {limit} W is outside V100-16GB's range "
                                        r"100-250 W"):
        ZeusPowerModel().estimate("x", "imagenet", resolve_flavor("v100"), limit, 256)


def test_power_model_never_guesses_without_a_fallback() -> None:
    m = ZeusPowerModel()
    with pytest.raises(SpecError, match="Zeus measured no H100-80GB"):
        m.estimate("x", "imagenet", resolve_flavor("h100"))
    with pytest.raises(SpecError, match="no idle power for V100-16GB"):
        m.idle_power_w(resolve_flavor("v100"))
    with pytest.raises(SpecError, match=r"at batches .* not 7"):
        m.estimate("x", "imagenet", resolve_flavor("v100"), None, 7)


class _Fallback:
    """An estimated model that the Zeus model chains to for what Zeus did not measure."""

    def limit_range(self, flavor: GpuFlavor) -> PowerLimitRange:
        return PowerLimitRange(100.0, flavor.tdp_w)

    def estimate(self, job_type: str, model: str | None, flavor: GpuFlavor,
                 power_limit_w: float | None = None,
                 batch_size: int | None = None) -> PowerEstimate:
        return PowerEstimate(flavor.tdp_w, 1.0, False, "estimated:test")

    def idle_power_w(self, flavor: GpuFlavor) -> float:
        return 42.0


def test_power_model_chains_to_a_fallback_for_the_rest() -> None:
    m = ZeusPowerModel(fallback=_Fallback())
    h100 = resolve_flavor("h100")
    assert m.estimate("x", "imagenet", h100).source == "estimated:test"
    assert m.estimate("x", "gpt3-1.3b", resolve_flavor("v100")).source == "estimated:test"
    assert m.estimate("x", "imagenet", resolve_flavor("v100")).source == "zeus:v100"
    assert m.limit_range(h100).max_w == 700.0 and m.idle_power_w(h100) == 42.0


@pytest.mark.parametrize("eta", [-0.1, 1.5, math.nan, math.inf])
def test_eta_outside_0_1_is_an_error_naming_it(eta: float) -> None:
    t, w = ZeusTable.load("v100"), workload("imagenet")
    for call in (lambda: zeus_cost(1.0, 1.0, eta, 250.0), lambda: exhaustive_best(t, w, eta),
                 lambda: simulate_recurring(t, w, eta, recurrences=1)):
        with pytest.raises(SpecError, match=rf"eta must be in \[0, 1\].*got {eta}"):
            call()


def test_cost_is_zeus_metric() -> None:
    assert zeus_cost(1000.0, 10.0, 0.5, 250.0) == 0.5 * 1000 + 0.5 * 250 * 10
    assert zeus_cost(1000.0, 10.0, 1.0, 250.0) == 1000.0
    assert zeus_cost(1000.0, 10.0, 0.0, 250.0) == 2500.0


@pytest.mark.parametrize("gpu", list(ZEUS_GPUS))
def test_zeus_choice_is_the_exhaustive_minimum_on_every_table(gpu: str) -> None:
    """JIT limit per batch, then the cheapest batch: exactly the table's minimum, per η."""
    t = ZeusTable.load(gpu)
    for w in WORKLOADS:
        for eta in ETAS:
            best = exhaustive_best(t, w, eta)
            ours = zeus_choice(t, w, eta)
            assert ours.cost == best.cost, (gpu, w.key, eta)
            # The JIT limit of the winning batch is its cheapest limit by brute force too.
            by_limit = min(t.power_limits(w, ours.batch_size),
                           key=lambda p: expected(t, w, ours.batch_size, p, eta).cost)
            assert expected(t, w, ours.batch_size, by_limit, eta).cost == ours.cost


def test_eta_moves_the_limit_energy_low_time_high() -> None:
    t, w = ZeusTable.load("v100"), workload("librispeech")
    energy_only = jit_power_limit(t, w, 48, 1.0).best_limit_w
    time_only = jit_power_limit(t, w, 48, 0.0).best_limit_w
    assert energy_only < time_only == 250


def test_jit_profiling_costs_the_first_epoch_of_each_batch_once() -> None:
    t, w = ZeusTable.load("v100"), workload("sentiment140")
    rec = simulate_recurring(t, w, 0.5, seed=3)
    first: dict[int, bool] = {}
    for r in rec.runs:
        assert r.profiled == (r.batch_size not in first)
        first.setdefault(r.batch_size, True)
    prof = jit_power_limit(t, w, 128, 0.5)
    run = next(r for r in rec.runs if r.batch_size == 128)
    row = t.power_row(w, 128, prof.best_limit_w)
    epochs = (run.time_s - prof.epoch_time_s) / row.time_per_epoch_s + 1
    assert epochs == pytest.approx(round(epochs))
    assert run.energy_j == pytest.approx(prof.epoch_energy_j
                                         + (epochs - 1) * row.energy_per_epoch_j)


@pytest.mark.slow
def test_recurring_job_learns_the_exhaustive_minimum_mostly() -> None:
    """The bandit learns from sampled seeds, so it can settle on a batch whose *expected* cost
    is a little above the table's minimum (Zeus's own simulator does the same: see
    docs/energy.md). Measured at η = 0.5 over 4 GPUs x 6 workloads x seeds 1-5: 107 of 120
    runs end exactly on the minimum, the worst 8.9 % above it; the test keeps that."""
    hits, worst = 0, 0.0
    for gpu in ZEUS_GPUS:
        t = ZeusTable.load(gpu)
        for w in WORKLOADS:
            best = exhaustive_best(t, w, 0.5)
            for seed in range(1, 6):
                final = simulate_recurring(t, w, 0.5, seed=seed).final
                assert final.power_limit_w == jit_power_limit(
                    t, w, final.batch_size, 0.5).best_limit_w
                gap = final.cost / best.cost - 1
                hits += gap == 0
                worst = max(worst, gap)
    assert hits >= 107 and worst < 0.09


def test_recurring_job_on_v100_ends_on_the_exhaustive_minimum() -> None:
    t = ZeusTable.load("v100")
    for w in WORKLOADS:
        assert simulate_recurring(t, w, 0.5, seed=1).final == exhaustive_best(t, w, 0.5), w.key


def test_recurring_job_reaches_once_per_recurrence_and_is_seeded() -> None:
    t, w = ZeusTable.load("v100"), workload("cifar100")
    a = simulate_recurring(t, w, 0.5, seed=1)
    assert a == simulate_recurring(t, w, 0.5, seed=1)
    n = default_recurrences(t, w)
    assert sum(r.reached for r in a.runs) == n == 2 * 10 * 7
    assert a.runs[0].batch_size == t.default_batch(w) and a.runs[0].reached
    # Early stopping: an unprofiled run never costs more than beta x the cheapest recurrence
    # finished before it (a recurrence's cost includes its failed tries).
    cheapest, spent, stopped = math.inf, 0.0, 0
    for r in a.runs:
        if not r.profiled:
            assert r.cost <= 2.0 * cheapest
        spent += r.cost
        stopped += not r.reached
        if r.reached:
            cheapest, spent = min(cheapest, spent), 0.0
    assert stopped > 0
    assert a.energy_j == pytest.approx(sum(r.energy_j for r in a.runs))


def test_bad_beta_and_recurrences_are_errors() -> None:
    t, w = ZeusTable.load("v100"), workload("imagenet")
    with pytest.raises(SpecError, match=r"beta .* must be >= 1, got 0.5"):
        simulate_recurring(t, w, 0.5, beta=0.5)
    with pytest.raises(SpecError, match="recurrences must be >= 1, got 0"):
        simulate_recurring(t, w, 0.5, recurrences=0)

