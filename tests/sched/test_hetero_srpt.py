"""hetero_srpt / hetero_gittins: flavor matching, gang defragmentation, no starvation."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Placement
from tessera.sched.policies.hetero_gittins import _gittins_remaining, _prior_quantiles
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import RESNET, make_cluster, make_job, make_workload, snapshot, view

_K80 = resolve_flavor("K80")

_V100_16GB = resolve_flavor("V100-16GB")

CYCLEGAN = "CycleGAN"  # V100 4.43 steps/s, K80 0.51: 8.8x faster on the V100
A3C = "A3C"  # V100 7.18 steps/s, K80 3.44: 2.1x faster on the V100


def _decide(cluster, *views, policy="hetero_srpt", round_s=360.0):  # type: ignore[no-untyped-def]
    oracle = ThroughputOracle(default_throughputs(), cluster)
    return decide(snapshot(cluster, *views, round_s=round_s), make_policy(policy),
                  DecisionContext(oracle, random.Random(0)))


def _two_jobs():  # type: ignore[no-untyped-def]
    t = default_throughputs()
    # A: 1 h on a V100, 8.8 h on a K80.  B: 0.8 h on a V100, 1.7 h on a K80.
    a = make_job("a", steps=3600 * t.throughput(CYCLEGAN, _V100_16GB, 1), job_type=CYCLEGAN)
    b = make_job("b", steps=0.8 * 3600 * t.throughput(A3C, _V100_16GB, 1), job_type=A3C)
    return a, b


@pytest.mark.parametrize("policy", ["hetero_srpt", "hetero_gittins"])
def test_matching_gives_the_fast_gpu_to_the_job_it_helps_most(policy: str) -> None:
    # SRPT by pair sends the shorter job B to the V100 and A to the K80: with B migrating
    # away at 0.8 h, A ends at ~1.71 h, a sum of ~2.51 h. A on the V100, B on the K80:
    # A ends at 1 h, B has done 60 % and finishes on the V100 at ~1.32 h: a sum of ~2.32 h.
    c = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    a, b = _two_jobs()
    out = _decide(c, view(a), view(b), policy=policy)
    assert out.placements["a"].flavor == _V100_16GB
    assert out.placements["b"].flavor == _K80


def test_srtf_by_pair_gets_the_two_job_example_wrong() -> None:
    c = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    a, b = _two_jobs()
    out = _decide(c, view(a), view(b), policy="srtf")
    assert out.placements["b"].flavor == _V100_16GB  # the mistake matching avoids


def test_matching_lowers_the_simulated_sum_of_jcts() -> None:
    c = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    a, b = _two_jobs()
    cfg = SimConfig(
        scheduler=SchedulerSettings(mode="rounds", round_s=60.0, checkpoint_s=0.0, restore_s=0.0))
    ours = simulate(make_workload(a, b), c, "hetero_srpt", cfg).summary.avg_jct_s
    base = simulate(make_workload(a, b), c, "srtf", cfg).summary.avg_jct_s
    assert ours < base
    assert ours * 2 == pytest.approx(2.32 * 3600, rel=0.03)


def test_uniform_speeds_reduce_to_shortest_remaining_first() -> None:
    c = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    short, long_ = make_job("s", steps=1e4), make_job("l", steps=1e6)
    out = _decide(c, view(long_), view(short))
    assert out.placements["s"].flavor == _V100_16GB
    assert out.placements["l"].flavor == _K80


def test_a_gang_gets_a_whole_node_instead_of_being_split() -> None:
    # Two 4-GPU V100 nodes, each holding two long 1-GPU jobs: 4 GPUs are free, but split
    # 2 + 2. A short 4-GPU ResNet gang would run split at a fraction of its speed; the
    # policy stops the two small jobs of one node instead (they are re-placed next round).
    c = make_cluster().node("v100", gpus=4, count=2).build()
    small = [
        view(make_job(f"s{i}", steps=1e8), JobState.RUNNING,
             Placement.of(_V100_16GB, ((f"v100-16gb-{i % 2:04d}", 1),)),
             progress_from_s=-3600.0)  # (past its lease: a swap may stop it)
        for i in range(4)
    ]
    gang = view(make_job("g", gpus=4, steps=1e4, job_type=RESNET))
    out = _decide(c, *small, gang)
    assert out.placements["g"].consolidated
    assert len(out.preempted) == 2
    plain = _decide(c, *small, gang, policy="srtf")
    assert not plain.placements["g"].consolidated  # what the core does without the policy


def test_a_big_gang_is_not_starved_by_a_stream_of_small_jobs() -> None:
    # One 4-GPU node; a 6 h 4-GPU gang arrives first, then a 30 min 1-GPU job every 10
    # minutes for 4 days. Without aging the small jobs (shorter, smaller) always outrank the
    # gang and it waits for the stream to end. The starvation guard moves a job that has
    # waited more than starvation_factor (4) times its remaining time to the top: 24 h here.
    c = make_cluster().node("v100", gpus=4).build()
    t = default_throughputs()
    rate1 = t.throughput(RESNET, _V100_16GB, 1)
    rate4 = t.throughput(RESNET, _V100_16GB, 4)
    jobs = [make_job("gang", gpus=4, steps=6 * 3600 * rate4)]
    jobs += [make_job(f"s{i:04d}", steps=1800 * rate1, submit_s=60.0 + 600.0 * i)
             for i in range(4 * 24 * 6)]

    def gang_jct(factor: float | None) -> float:
        res = simulate(make_workload(*jobs), c,
                       make_policy("hetero_srpt", {"starvation_factor": factor}), SimConfig())
        rec = next(r for r in res.jobs if r.job_id == "gang")
        assert rec.jct_s is not None
        return rec.jct_s

    assert 24 * 3600 < gang_jct(4.0) < 32 * 3600
    assert gang_jct(None) > 96 * 3600  # starved until the stream ended


def test_gittins_remaining_time_follows_the_prior() -> None:
    # Two-point prior: half the jobs last 1 h, half 10 h. A fresh job is expected to need
    # the 1 h quantum first (1/G = (0.5·1 + 0.5·1) / 0.5 = 2 h); once it has run past 1 h
    # it is surely a 10 h job with 9 h left.
    sizes = np.array([3600.0, 36000.0])
    assert _gittins_remaining(sizes, 0.0) == pytest.approx(7200.0)
    assert _gittins_remaining(sizes, 2 * 3600.0) == pytest.approx(8 * 3600.0)
    assert _gittins_remaining(sizes, 1e6) == pytest.approx(1e6)  # beyond the prior
    q = _prior_quantiles(((1.0, 1.0, 100.0),), 64)
    assert q[0] > 60.0 and q[-1] < 6000.0 and np.all(np.diff(q) > 0)


def test_same_inputs_same_ranking() -> None:
    c = make_cluster().node("v100", gpus=2).node("p100", gpus=2).node("k80", gpus=2).build()
    views = [view(make_job(f"j{i}", gpus=1 + i % 2, steps=1e4 * (i + 1), submit_s=i))
             for i in range(8)]
    a = _decide(c, *views)
    b = _decide(c, *views)
    assert a.placements == b.placements


def test_a_failed_matching_lp_is_reported_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the completion-rate matching LP fails, the greedy order is kept and the ranking
    says so in its fallbacks (the simulator counts them into the run's notes)."""
    from tessera.sched.core.lp import LpSolver, SolverError
    from tessera.sched.policies import hetero_flavors, hetero_srpt

    def fail(*a: object, **k: object) -> None:
        raise SolverError("hetero_srpt matching LP: HiGHS ended with Infeasible")

    monkeypatch.setattr(hetero_flavors, "solve_lp", fail)
    j = view(make_job("a", 1))
    selected = [(j, {_V100_16GB: 2.0, _K80: 1.0}, [_V100_16GB, _K80])]
    out, why = hetero_srpt.HeteroSrpt._match(selected, {_V100_16GB: 1, _K80: 1}, LpSolver())
    assert out == selected
    assert why == ("hetero_srpt matching LP: HiGHS ended with Infeasible; kept the greedy "
                   "flavor order",)


def test_a_running_job_with_nothing_left_ranks_first_without_dividing_by_zero() -> None:
    # its remaining time on its own flavor is 0 s and it pays no restart there: the best
    # cost is 0, which must rank it first rather than raise ZeroDivisionError
    c = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
    a, b = _two_jobs()
    done = view(a, JobState.RUNNING, Placement.of(_V100_16GB, (("v100-16gb-0000", 1),)),
                remaining_steps=0.0)
    out = _decide(c, done, view(b))
    assert out.placements["a"].flavor == _V100_16GB
    assert out.placements["b"].flavor == _K80
