"""Issue 36 part 3 under a trace's own arrivals: each rate level sized for the bursts its
windows carry (``share/window_arrivals.py``, ``share/static_p99.py``,
``compare_strategies(own_arrivals=True)``)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.share.mig import mig_gpu
from tessera.share.p99 import ArrivalModel, meets, plan_for_p99
from tessera.share.profiles import BatchingRule, Service, load_parvagpu_profiles
from tessera.share.reconfig import compare_strategies, window_levels
from tessera.share.serving_sim import simulate
from tessera.share.traces import RequestTrace
from tessera.share.window_arrivals import burstiness, level_arrivals, window_times

HOUR_S = 3600.0
TABLE = load_parvagpu_profiles()
GPU = mig_gpu(TABLE.gpu)
RULE = BatchingRule()
SVC = (Service("ranker", "resnet50", 2400.0, 138.0),)  # one 7g slice under Poisson


def _bursty_trace() -> RequestTrace:
    """Four 1-hour windows: the busiest (600 requests) arrives in 2 bursts of 300 at once, the
    next three are evenly spaced (300, 150, 600 requests)."""
    rng = np.random.default_rng(3)
    bursts = np.repeat(np.sort(rng.uniform(0, HOUR_S, 2)), 300)
    even = [np.linspace(0, HOUR_S, n, endpoint=False) + w * HOUR_S
            for w, n in ((1, 300), (2, 150), (3, 600))]
    times = np.sort(np.concatenate([bursts, *even]))
    return RequestTrace("synthetic", times, np.ones(len(times)), "requests")


def test_levels_pool_only_the_gaps_inside_their_windows() -> None:
    tr = _bursty_trace()
    per_window = window_times(tr, 1.0)
    assert [len(w) for w in per_window] == [600, 300, 150, 600]
    levels = window_levels(tr, 1.0)
    assert levels[0] == levels[3] == 1.0  # the bursty and the even busy window share a level
    models = level_arrivals(tr, 1.0, levels, min_requests=1000)
    top = models[1.0]
    # 599 + 599 gaps inside the two windows; the idle hours between them are not gaps
    assert top.requests_per_service == 1198 and top.trace_times_s is not None
    assert len(top.trace_times_s) == 1199
    assert burstiness(top) > 3 and burstiness(models[levels[1]]) < 0.01


def test_a_bursty_window_needs_more_than_its_poisson_plan() -> None:
    tr = _bursty_trace()
    levels = window_levels(tr, 1.0)
    own = level_arrivals(tr, 1.0, levels, min_requests=5000)[1.0]
    poisson = plan_for_p99(SVC, TABLE, GPU, RULE, arrivals=ArrivalModel(requests_per_service=5000))
    assert poisson.meets
    # the Poisson-sized layout misses p99 under the window's own bursts...
    sim = simulate(poisson.plan, own.streams(SVC), TABLE, seed=own.seed)
    assert not meets(sim.services[0], 0.99)
    # ...and sizing under them takes more capacity, and then meets p99 there
    sized = plan_for_p99(SVC, TABLE, GPU, RULE, arrivals=own, util_floor=0.2, max_rounds=24)
    assert sized.meets
    assert sized.knobs["ranker"].max_utilization < poisson.knobs["ranker"].max_utilization
    assert (poisson.plan.gpus_used, sized.plan.gpus_used) == (1, 2)


@pytest.mark.slow
def test_every_strategy_meets_p99_in_each_windows_own_arrivals() -> None:
    tr = _bursty_trace()
    c = compare_strategies(SVC, tr, TABLE, GPU, RULE, window_h=1.0, own_arrivals=True,
                           arrivals=ArrivalModel(requests_per_service=2000))
    for s in c.strategies:
        assert s.violating_windows == 0, s
    # under Poisson the peak plan looked enough: the same comparison misses in the bursty hour
    plain = compare_strategies(SVC, tr, TABLE, GPU, RULE, window_h=1.0,
                               arrivals=ArrivalModel(requests_per_service=2000))
    assert plain.get("peak").gpu_hours <= c.get("peak").gpu_hours
