"""The heterogeneous data-parallel split (tessera.plan.dp)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.errors import SpecError
from tessera.model.cluster import LinkKind
from tessera.model.gpus import resolve_flavor
from tessera.perf.steptime import DeviceCost
from tessera.plan.dp import (
    BatchTooLargeError,
    DpDevice,
    continuous_split,
    integer_split,
    split_batch,
)

from .builders import brute_force_step_s, device, node

T4 = resolve_flavor("T4")


def cost(alpha: float, beta: float, cap: int) -> DeviceCost:
    return DeviceCost(T4, alpha, beta, cap)


# --- continuous optimum -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alphas", "betas", "batch"),
    [((0.1, 0.1), (0.01, 0.02), 300), ((0.0, 0.05, 0.2), (0.001, 0.003, 0.002), 1000),
     ((0.3,), (0.01,), 50)],
    ids=["two-devices", "three-devices", "one-device"],
)
def test_uncapped_optimum_is_the_closed_form(alphas: tuple[float, ...],
                                             betas: tuple[float, ...], batch: int) -> None:
    costs = [cost(a, b, 10**9) for a, b in zip(alphas, betas, strict=True)]
    t, b = continuous_split(costs, [1] * len(costs), batch, 1)
    closed = (batch + sum(a / bb for a, bb in zip(alphas, betas, strict=True))) / sum(
        1 / bb for bb in betas)
    assert t == pytest.approx(closed)
    assert sum(b) == pytest.approx(batch)
    for c, x in zip(costs, b, strict=True):   # everyone finishes together
        assert c.step_time_s(x) == pytest.approx(t)


def test_capped_device_is_water_filled() -> None:
    fast, slow = cost(0.0, 0.001, 100), cost(0.0, 0.01, 10**6)
    t, (bf, bs) = continuous_split([fast, slow], [1, 1], 500, 1)
    assert bf == pytest.approx(100)           # fast device full, finishes early
    assert bs == pytest.approx(400)
    assert t == pytest.approx(4.0)


def test_too_slow_device_gets_nothing() -> None:
    t, (_, b_slow) = continuous_split([cost(0.0, 0.001, 10**6), cost(5.0, 0.001, 10**6)],
                                      [1, 1], 1000, 1)
    assert t == pytest.approx(1.0) and b_slow == 0.0


def test_accumulation_adds_micro_steps_when_memory_is_short() -> None:
    c = cost(0.1, 0.01, 10)
    t, (b,) = continuous_split([c], [1], 25, 4)
    assert b == pytest.approx(25)
    assert t == pytest.approx(3 * 0.1 + 0.25)
    with pytest.raises(BatchTooLargeError) as e:
        continuous_split([c], [1], 25, 2)
    assert e.value.min_micro_steps == 3


# --- integer rounding and its bound -------------------------------------------------------------

device_costs = st.lists(
    st.builds(cost, st.floats(0.0, 0.5), st.floats(1e-4, 0.05), st.integers(1, 64)),
    min_size=1, max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(costs=device_costs, frac=st.floats(0.01, 1.0), k=st.integers(1, 3))
def test_integer_split_respects_the_documented_bound(costs: list[DeviceCost], frac: float,
                                                     k: int) -> None:
    total_cap = sum(c.max_local_bsz for c in costs) * k
    batch = max(1, int(frac * total_cap))
    t_star, per = continuous_split(costs, [1] * len(costs), batch, k)
    b = integer_split(costs, batch, k)
    assert sum(b) == batch
    assert all(0 <= x <= c.max_local_bsz * k for x, c in zip(b, costs, strict=True))
    t_int = max(c.step_time_s(x) for c, x in zip(costs, b, strict=True))
    slack = max(c.beta_s_per_sample for c, x in zip(costs, per, strict=True) if x > 0)
    assert t_star - 1e-9 <= t_int <= t_star + slack + 1e-9


@pytest.mark.parametrize(
    ("costs", "batch", "k", "t_expected"),
    [([cost(0.0, 0.025982187168583852, 1), cost(0.5, 0.03125, 1)], 1, 1, 0.025982187168583852),
     ([cost(0.5, 0.03125, 1), cost(0.5, 0.006350052038107763, 1)], 3, 3,
      2 * 0.5 + 2 * 0.006350052038107763),
     ([cost(0.5, 0.03125, 2), cost(0.024764628891730596, 0.03125, 2)], 2, 1,
      0.024764628891730596 + 2 * 0.03125)],
    ids=["plateau-before-slow-device", "plateau-before-next-micro-step", "cap-times-beta"],
)
def test_batch_ending_exactly_on_a_plateau(costs: list[DeviceCost], batch: int, k: int,
                                           t_expected: float) -> None:
    """Falsifying examples: B equals the samples done when S(T) goes flat.

    (1/β)·(β·cap) rounded to cap − 1 ulp, so the old sweep found S one ulp short of B,
    skipped the flat stretch (an α) and returned T* ≈ 0.5–1.03 s above T_int.
    """
    t_star, per = continuous_split(costs, [1] * len(costs), batch, k)
    assert t_star == pytest.approx(t_expected, rel=1e-12)
    assert sum(per) == pytest.approx(batch)
    b = integer_split(costs, batch, k)
    t_int = max(c.step_time_s(x) for c, x in zip(costs, b, strict=True))
    assert t_star - 1e-9 <= t_int == pytest.approx(t_expected, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(costs=st.lists(st.builds(cost, st.floats(0.0, 0.3), st.floats(1e-3, 0.05),
                                st.integers(1, 6)), min_size=1, max_size=3),
       batch=st.integers(1, 10))
def test_integer_split_is_exactly_min_max(costs: list[DeviceCost], batch: int) -> None:
    from .builders import compositions

    k = 2
    if sum(c.max_local_bsz for c in costs) * k < batch:
        return
    b = integer_split(costs, batch, k)
    got = max(c.step_time_s(x) for c, x in zip(costs, b, strict=True))
    best = min(max(c.step_time_s(x) for c, x in zip(costs, s, strict=True))
               for s in compositions(batch, [c.max_local_bsz * k for c in costs]))
    assert got == pytest.approx(best)
    t_star, _ = continuous_split(costs, [1] * len(costs), batch, k)
    assert t_star <= best + 1e-9             # the continuous optimum is a lower bound


# --- choosing devices: equal to brute force ------------------------------------------------------

NODES = [node("n0"), node("n1"), node("eth", inter=LinkKind.ETHERNET)]


@st.composite
def small_instances(draw: st.DrawFn) -> tuple[list[DpDevice], int, float]:
    n = draw(st.integers(1, 4))
    kinds = [(draw(st.floats(0.0, 0.3)), draw(st.floats(1e-3, 0.05)), draw(st.integers(1, 5)))
             for _ in range(draw(st.integers(1, 2)))]
    devs = []
    for _ in range(n):
        a, b, cap = draw(st.sampled_from(kinds))
        devs.append(device("T4", a, b, cap, draw(st.sampled_from(NODES))))
    batch = draw(st.integers(1, 10))
    grad = draw(st.sampled_from([0.0, 1e6, 1e8, 1e9]))
    return devs, batch, grad


@settings(max_examples=80, deadline=None)
@given(inst=small_instances())
def test_split_equals_brute_force_on_small_instances(
    inst: tuple[list[DpDevice], int, float]
) -> None:
    devs, batch, grad = inst
    k = 2
    if sum(d.cost.max_local_bsz for d in devs) * k < batch:
        with pytest.raises(BatchTooLargeError):
            split_batch(devs, batch, grad, max_micro_steps=k)
        return
    plan = split_batch(devs, batch, grad, max_micro_steps=k)
    assert sum(s.local_bsz for s in plan.shares) == batch
    assert plan.step_time_s == pytest.approx(brute_force_step_s(devs, batch, grad, k), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(inst=small_instances())
def test_local_search_path_is_close_to_brute_force(
    inst: tuple[list[DpDevice], int, float]
) -> None:
    devs, batch, grad = inst
    if sum(d.cost.max_local_bsz for d in devs) * 2 < batch:
        return
    plan = split_batch(devs, batch, grad, max_micro_steps=2, exact_limit=0)
    best = brute_force_step_s(devs, batch, grad, 2)
    assert plan.step_time_s <= best * 1.10 + 1e-9


# --- dropping, explanations, errors -------------------------------------------------------------


def test_device_behind_slow_link_is_dropped_with_a_reason() -> None:
    fast = [device("A100-40GB", 0.05, 0.001, 512, NODES[0]) for _ in range(4)]
    slow = [device("T4", 0.05, 0.004, 256, NODES[2]) for _ in range(2)]
    plan = split_batch(fast + slow, 512, grad_bytes=400e6)
    assert {s.flavor.short for s in plan.shares} == {"A100-40GB"}
    (dropped,) = plan.dropped
    assert dropped.flavor.short == "T4" and dropped.count == 2
    assert "instead of" in dropped.reason


def test_efficiency_is_at_most_one_and_bound_is_sum_of_rates() -> None:
    devs = [device("T4", 0.1, 0.01, 20, NODES[0]), device("T4", 0.1, 0.02, 20, NODES[0])]
    plan = split_batch(devs, 40, grad_bytes=0.0)
    assert plan.bound_samples_per_s == pytest.approx(20 / 0.3 + 20 / 0.5)
    assert 0 < plan.efficiency <= 1


@pytest.mark.parametrize(
    ("batch", "steps", "error", "match"),
    [(0, 8, SpecError, "positive"), (10**6, 8, BatchTooLargeError, "at least 25000 micro-steps"),
     (41, 1, BatchTooLargeError, "hold 40 samples per pass")],
    ids=["zero-batch", "way-too-big", "no-accumulation"],
)
def test_bad_batches(batch: int, steps: int, error: type[Exception], match: str) -> None:
    devs = [device("T4", 0.1, 0.01, 20, NODES[0]), device("T4", 0.1, 0.02, 20, NODES[0])]
    with pytest.raises(error, match=match):
        split_batch(devs, batch, 0.0, max_micro_steps=steps)


def test_no_devices() -> None:
    with pytest.raises(SpecError, match="no devices"):
        split_batch([], 10, 0.0)


def test_shares_report_micro_steps() -> None:
    plan = split_batch([device("T4", 0.1, 0.01, 10, NODES[0])], 25, 0.0, max_micro_steps=3)
    (s,) = plan.shares
    assert (s.local_bsz, s.micro_steps) == (25, 3)
    assert s.compute_time_s == pytest.approx(0.3 + 0.25)
    assert math.isclose(plan.step_time_s, s.compute_time_s)


def test_local_search_swaps_a_slow_device_for_a_faster_one() -> None:
    """One sample: the best plan is the one faster device. From "one slow device" the local
    search used to stop (adding the fast device costs a cross-node all-reduce, dropping the slow
    one leaves none): a swap is one move (found by the property test above)."""
    n0, n1 = node("n0"), node("n1")
    devs = [device("T4", 0.0, 0.0234375, 1, n0) for _ in range(3)]
    devs.append(device("T4", 0.0, 0.015625, 1, n1))
    plan = split_batch(devs, 1, 1e8, max_micro_steps=2, exact_limit=0)
    assert plan.step_time_s == pytest.approx(0.015625)
    assert plan.step_time_s == pytest.approx(brute_force_step_s(devs, 1, 1e8, 2))
