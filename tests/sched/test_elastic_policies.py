"""Sia, Pollux and goodput_srpt: their maths against hand values and exhaustive search."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.goodput import best_batch, packed_placement
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import PolicyContext
from tessera.sched.core.snapshot import Placement
from tessera.sched.elastic.policy import ElasticMemory, realloc_factor
from tessera.sched.policies.goodput_srpt import paid_restart
from tessera.sched.policies.pollux import fitness, pollux_factor, power_term
from tessera.workload.elastic import elastic_range
from tests.builders import make_cluster, make_job, snapshot, view

_T4 = resolve_flavor("T4")

_A100_40GB = resolve_flavor("A100-40GB")

TYPE = "cifar10 (batch size 129)"
JOBS = (("a", "cifar10", 2048), ("b", "bert", 384), ("c", "yolov3", 64))


def _cluster():  # type: ignore[no-untyped-def]
    return make_cluster().node(_T4, gpus=4).node(_A100_40GB, gpus=8).build()


def _views():  # type: ignore[no-untyped-def]
    return [view(make_job(jid, 1, job_type=TYPE, elastic=elastic_range(m, 1, b)))
            for jid, m, b in JOBS]


def _rank(policy: str, views, now_s: float = 0.0, state: object = None, **opts):  # type: ignore[no-untyped-def]
    c = _cluster()
    snap = snapshot(c, *views, now_s=now_s, round_s=60.0, policy_state=state)
    ctx = PolicyContext(snap, ThroughputOracle(sia_throughputs(), c), random.Random(0))
    return make_policy(policy, opts).rank(ctx)


def test_the_reallocation_factor_matches_hand_values() -> None:
    assert realloc_factor(1000.0, 2, 30.0) == pytest.approx(940 / 1030)
    assert realloc_factor(20.0, 5, 30.0) == 1.0  # younger than one restart: not damped
    assert realloc_factor(100.0, 10, 30.0) == 0.0


def _goodput(model: str, batch: int, flavor: GpuFlavor, n: int, per: int) -> float | None:
    e = elastic_range(model, 1, batch)
    try:
        return best_batch(model, flavor, packed_placement(n, per), 0.0,
                          max_batch=e.max_batch_samples,
                          min_batch=e.initial_batch_samples).goodput_samples_per_s
    except Exception:  # an unmeasured or unsplittable configuration is not offered
        return None


SIA_CONFIGS = [(_T4, n, 4) for n in (1, 2, 4)] + [(_A100_40GB, n, 8) for n in (1, 2, 4, 8)]


def test_sia_picks_the_exhaustive_optimum_of_its_objective() -> None:
    ranking = _rank("sia", _views(), explore=False)
    table = {}
    for jid, m, b in JOBS:
        goods = {cfg: g for cfg in SIA_CONFIGS if (g := _goodput(m, b, *cfg)) is not None}
        lo = min(goods.values())
        table[jid] = {cfg: round((g / lo) ** -0.5, 2) for cfg, g in goods.items()}

    def cost(choice) -> float | None:  # type: ignore[no-untyped-def]
        used = {_T4: 0, _A100_40GB: 0}
        total = 0.0
        for jid, cfg in zip(table, choice, strict=True):
            if cfg is None:
                total += 1.1
            else:
                used[cfg[0]] += cfg[1]
                total += table[jid][cfg]
        return total if used[_T4] <= 4 and used[_A100_40GB] <= 8 else None

    costs = [c for choice in itertools.product(*[[None, *t] for t in table.values()])
             if (c := cost(choice)) is not None]
    sizes = ranking.sizes
    flavor = dict(ranking.candidates)
    chosen = tuple((flavor[jid], sizes[jid].num_gpus,
                    4 if flavor[jid] == _T4 else 8) if jid in sizes else None for jid in table)
    assert cost(chosen) == pytest.approx(min(costs))
    assert all(sizes[j].global_batch_samples >= b for j, _m, b in JOBS if j in sizes)


def test_sia_damps_a_change_for_a_job_that_restarted_before() -> None:
    held = Placement.of(_A100_40GB, ((_cluster().nodes[1].node_id, 1),), global_batch_samples=2048)
    spec = make_job("a", 1, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    running = view(spec, JobState.RUNNING, held, as_of_s=4000.0)
    free = _rank("sia", [running], now_s=4000.0, explore=False)
    assert free.sizes["a"].num_gpus > 1  # alone and undamped, it grows
    # 130 restarts of 30 s in 4,000 s: the factor is 0, every other configuration worthless
    damped = _rank("sia", [running], now_s=4000.0, explore=False,
                   state=ElasticMemory({spec.job_id: 130}))
    assert damped.sizes["a"].num_gpus == 1 and dict(damped.candidates)["a"] == _A100_40GB


def test_sia_and_pollux_grow_a_new_job_by_doubling() -> None:
    for policy in ("sia", "pollux", "goodput_srpt"):
        ranking = _rank(policy, _views()[:1], now_s=600.0)
        assert ranking.sizes["a"].num_gpus == 1, policy  # never run: at most 1 GPU
        mem = ElasticMemory(largest_run={make_job("a").job_id: 2})
        ranking = _rank(policy, _views()[:1], now_s=600.0, state=mem)
        assert ranking.sizes["a"].num_gpus <= 4, policy


def test_pollux_fitness_matches_hand_values() -> None:
    assert power_term(0.0, -1.0) == pytest.approx(1000.0)
    expected = 1.0 / ((1 / 1.001 + 1 / 3.001) / 2)
    assert fitness([1.0, 3.0], -1.0) == pytest.approx(expected)
    assert fitness([2.0, 2.0], -1.0) > fitness([1.0, 3.0], -1.0)  # p < 0 prefers the even split


def test_pollux_picks_the_exhaustive_optimum_of_its_power_mean() -> None:
    ranking = _rank("pollux", _views(), now_s=600.0, explore=False)
    fair = math.ceil(12 / 3)
    per = {_T4: 4, _A100_40GB: 8}
    # speed-ups scaled as over servers of 4 GPUs (the smallest server), damped as the jobs
    # wait (age 600 s, no restarts), at most 4 GPUs a job (the T4s: the smallest flavor)
    scale, damped = 1 / 4, 600 / 630
    blind = {}
    for jid, m, b in JOBS:
        by_n = {}
        for n in range(1, 5):
            # type-blind: the mean over flavors of n GPUs packed on each flavor's servers
            goods = [g for fl in per if (g := _goodput(m, b, fl, n, per[fl])) is not None]
            if goods:
                by_n[n] = sum(goods) / len(goods)
        base = by_n[max(n for n in by_n if n <= fair)]
        blind[jid] = {n: g / base * scale * damped for n, g in by_n.items()}

    def value(choice) -> float | None:  # type: ignore[no-untyped-def]
        used = {_T4: 0, _A100_40GB: 0}
        speedups = []
        for jid, opt in zip(blind, choice, strict=True):
            if opt is None:
                speedups.append(0.0)
                continue
            fl, n = opt
            used[fl] += n
            speedups.append(blind[jid][n])
        return fitness(speedups, -1.0) if used[_T4] <= 4 and used[_A100_40GB] <= 8 else None

    options = {jid: [(fl, n) for fl in per for n in blind[jid] if n <= per[fl]] for jid in blind}
    best = max(v for choice in itertools.product(*[[None, *o] for o in options.values()])
               if (v := value(choice)) is not None)
    flavor = dict(ranking.candidates)
    chosen = tuple((flavor[j], ranking.sizes[j].num_gpus) if j in ranking.sizes else None
                   for j in blind)
    assert value(chosen) == pytest.approx(best, rel=1e-6)


def test_pollux_damps_a_waiting_job_as_pollux_does() -> None:
    """Pollux counts any allocation but the current one as a restart, a waiting job's first
    one included, and exempts no young job: at age 0 every allocation is worth nothing."""
    assert pollux_factor(10.0, 0, 30.0) == pytest.approx(0.25)
    assert pollux_factor(20.0, 5, 30.0) == 0.0  # (Sia's realloc_factor: 1, too young)
    assert pollux_factor(1000.0, 2, 30.0) == pytest.approx(940 / 1030)
    assert _rank("pollux", _views()[:1], now_s=0.0).sizes == {}
    assert _rank("pollux", _views()[:1], now_s=60.0).sizes["a"].num_gpus == 1


def test_pollux_measures_speed_ups_against_the_fair_share_past_the_exploration_cap() -> None:
    """Pollux's base goodput is its model's at the fair share, whatever the job may be given
    now (``Problem.__init__``): a job that never ran, capped at 1 GPU, is at 1 GPU as far from
    its fair share (4 of 12 GPUs among 3 jobs) as any other job."""
    from tessera.sched.elastic.goodput import all_counts_configs
    from tessera.sched.elastic.policy import ConfigSet
    from tessera.sched.policies.pollux import Pollux

    nodes = _cluster().nodes
    sets = ConfigSet(all_counts_configs(nodes, 4), nodes)
    pol = make_policy("pollux")
    assert isinstance(pol, Pollux)
    v = _views()[0]
    capped = dict(pol._speedups(sets, v, 0, 4, 1, 600.0, (), {}))
    free = dict(pol._speedups(sets, v, 0, 4, 4, 600.0, (), {}))
    assert set(capped) < set(free)  # at most 1 GPU, one option per flavor
    assert all(capped[c] == free[c] < 1.0 for c in capped)


def test_pollux_gives_no_job_more_gpus_than_the_smallest_flavor_holds() -> None:
    """Sia's heterogeneity-unaware runs cap a job at the GPUs of its smallest GPU type."""
    c = make_cluster().node(_T4, gpus=4).node(_A100_40GB, gpus=8, count=2).build()
    job = view(make_job("a", 1, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048)))
    snap = snapshot(c, job, now_s=600.0, round_s=60.0)
    ctx = PolicyContext(snap, ThroughputOracle(sia_throughputs(), c), random.Random(0))
    ranking = make_policy("pollux", {"explore": False}).rank(ctx)
    assert ranking.sizes["a"].num_gpus == 4


def test_goodput_srpt_charges_a_restart_against_the_time_left() -> None:
    assert paid_restart(2.0, 0.0, 100.0) == pytest.approx(2.0)
    assert paid_restart(2.0, 50.0, 100.0) == pytest.approx(100.0 / 100.0)
    ranking = _rank("goodput_srpt", _views(), explore=False)
    assert set(ranking.sizes) == {"a", "b", "c"}  # everyone gets a seat when GPUs allow
