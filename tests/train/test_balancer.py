"""The online balancer: fits, integer splits, dead-band, change detection, state round-trip.

Pure Python (no torch): timings come from a known device model, so the right answer is known.
"""

from __future__ import annotations

import itertools

import pytest

from tessera.errors import SpecError
from tessera.train.balancer import (
    BalancerConfig,
    OnlineBalancer,
    StepModel,
    balanced_split,
    equal_split,
    fit_step_model,
    predicted_step_s,
    proportional_split,
)


def test_fit_recovers_linear_model():
    m = fit_step_model([4, 8, 16], [0.002 + 0.001 * b for b in (4, 8, 16)])
    assert m.alpha_s == pytest.approx(0.002)
    assert m.beta_s == pytest.approx(0.001)


def test_fit_with_one_batch_size_is_proportional():
    m = fit_step_model([10, 10], [0.05, 0.07])
    assert m.alpha_s == 0.0
    assert m.beta_s == pytest.approx(0.006)


def test_fit_never_returns_negative_overhead():
    m = fit_step_model([2, 10], [0.001, 0.020])  # the line through both points has α < 0
    assert m.alpha_s >= 0 and m.beta_s > 0


@pytest.mark.parametrize(
    ("models", "batch"),
    [
        ([StepModel(0.0, 1 / 3), StepModel(0.0, 1.0), StepModel(0.0, 1.0)], 48),
        ([StepModel(0.002, 0.001), StepModel(0.001, 0.004)], 17),
        ([StepModel(0.01, 0.001), StepModel(0.0, 0.001), StepModel(0.0, 0.0005)], 9),
        ([StepModel(0.0, 1.0)] * 3, 10),
    ],
    ids=["3:1:1", "overheads", "big-overhead", "equal-speeds-remainder"],
)
def test_balanced_split_is_integer_optimal(models, batch):
    split = balanced_split(models, batch)
    assert sum(split) == batch and min(split) >= 1
    best = min(
        predicted_step_s(models, s)
        for s in itertools.product(range(1, batch + 1), repeat=len(models))
        if sum(s) == batch
    )
    assert predicted_step_s(models, split) == pytest.approx(best)


def test_equal_and_proportional_splits():
    assert equal_split(10, 3) == (4, 3, 3)
    assert proportional_split([3.0, 1.0, 1.0], 50) == (30, 10, 10)
    with pytest.raises(SpecError):
        equal_split(2, 3)
    with pytest.raises(SpecError):
        balanced_split([StepModel(0, 1)] * 3, 2)


def _times(speeds, split, alpha_s=0.001, beta_s=0.002, spike=None):
    times = [(alpha_s + beta_s * b) / s for b, s in zip(split, speeds, strict=True)]
    if spike is not None:
        times[spike] *= 3
    return times


def _run(bal, speeds_at, steps, spikes=()):
    events = []
    for step in range(steps):
        ev = bal.observe(step, _times(speeds_at(step), bal.split,
                                      spike=dict(spikes).get(step)))
        if ev is not None:
            events.append(ev)
    return events


def test_converges_from_equal_split_then_stays_put():
    speeds = (3.0, 1.0, 1.0)
    bal = OnlineBalancer(48, equal_split(48, 3))
    events = _run(bal, lambda s: speeds, 20)
    assert 1 <= len(events) <= 3
    assert events[0].step == 1  # warm-up step 0 is ignored, step 1 already measured
    assert events[0].predicted_gain > 0.3
    final = predicted_step_s(
        [StepModel(0.001 / s, 0.002 / s) for s in speeds], bal.split)
    optimum = predicted_step_s(
        [StepModel(0.001 / s, 0.002 / s) for s in speeds],
        balanced_split([StepModel(0.001 / s, 0.002 / s) for s in speeds], 48))
    assert final <= optimum * 1.05
    assert events[-1].step < 6


def test_dead_band_ignores_small_gains():
    # Already within one sample of optimal: nothing beats it by 5 %.
    bal = OnlineBalancer(48, (29, 10, 9), BalancerConfig(deadband=0.05))
    assert _run(bal, lambda s: (3.0, 1.0, 1.0), 15) == []


def test_single_spike_is_not_a_speed_change():
    bal = OnlineBalancer(48, (29, 10, 9))
    events = _run(bal, lambda s: (3.0, 1.0, 1.0), 15, spikes=[(8, 1)])
    assert events == []


def test_speed_change_is_detected_and_rebalanced_within_a_few_steps():
    change_step = 10
    bal = OnlineBalancer(48, (29, 10, 9))
    events = _run(bal, lambda s: (3.0, 1.0, 1.0) if s < change_step else (1.0, 1.0, 1.0), 25)
    assert events, "the slowdown of rank 0 was not acted on"
    first = events[0]
    assert change_step <= first.step <= change_step + 3
    assert "rank 0" in first.reason
    assert bal.split[0] < 20  # rank 0 gave work away


def test_state_round_trip_decides_identically():
    speeds = (2.0, 1.0)
    a = OnlineBalancer(30, (15, 15))
    _run(a, lambda s: speeds, 3)
    b = OnlineBalancer.from_state_dict(a.state_dict())
    for step in range(3, 12):
        ta, tb = _times(speeds, a.split), _times(speeds, b.split)
        assert ta == tb
        assert a.observe(step, ta) == b.observe(step, tb)
    assert a.split == b.split


@pytest.mark.parametrize(
    "kwargs",
    [{"deadband": 1.5}, {"window_steps": 1}, {"confirm_steps": 8, "window_steps": 8}],
    ids=["deadband>1", "tiny-window", "confirm>=window"],
)
def test_bad_config_is_rejected(kwargs):
    with pytest.raises(SpecError):
        BalancerConfig(**kwargs)
