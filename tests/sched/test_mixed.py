"""Mixed gangs: one job on GPUs of several flavors, at the planner's predicted speed."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import PendingKind, PlacementOptions, decide
from tessera.sched.core.feasibility import infeasibility
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.snapshot import Placement
from tessera.sched.mixed.rates import MixedRates, local_batch_of
from tests.builders import RESNET, make_cluster, make_job, snapshot, view

_K80 = resolve_flavor("K80")
_P100 = resolve_flavor("P100")
_V100_16GB = resolve_flavor("V100-16GB")
_V100_32GB = resolve_flavor("V100-32GB")
_T4 = resolve_flavor("T4")
_A100_40GB = resolve_flavor("A100-40GB")

V100, P100, K80 = resolve_flavor("V100-16GB"), resolve_flavor("P100"), resolve_flavor("K80")
MIXED = PlacementOptions(mixed_gangs=True)


def _oracle(cluster):  # type: ignore[no-untyped-def]
    return ThroughputOracle(default_throughputs(), cluster)


def _decide(cluster, *views, policy="fifo", options=MIXED, now_s=0.0):  # type: ignore[no-untyped-def]
    return decide(snapshot(cluster, *views, now_s=now_s), make_policy(policy),
                  DecisionContext(_oracle(cluster), random.Random(0)), options)


# -- the placement value -----------------------------------------------------------------------

def test_mixed_placement_counts_gpus_per_flavor() -> None:
    p = Placement.mixed((("v-0", V100, 4), ("p-0", P100, 3), ("v-1", V100, 1)))
    assert p.is_mixed and not p.consolidated
    assert p.label == f"{P100}+{V100}" and p.flavors == (P100, V100)
    assert p.flavor_counts() == ((P100, 3), (V100, 5))
    assert (p.gpus_of(V100), p.gpus_of(P100), p.gpus_of(K80)) == (5, 3, 0)
    assert "mixed (3×P100, 5×V100-16GB)" in p.describe()


def test_one_flavor_is_a_homogeneous_placement() -> None:
    p = Placement.mixed((("v-0", V100, 4), ("v-1", V100, 2)))
    assert not p.is_mixed and p.flavor == V100 and p.flavor_counts() == ((V100, 6),)


def test_free_gpus_take_and_release_a_mixed_gang() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4, count=2).build()
    free = FreeGpus(c.nodes)
    p = free.find_mixed([V100, P100], 7)
    assert p is not None and p.flavor_counts() == ((P100, 3), (V100, 4))
    free.take(p)
    assert (free.total_free(V100), free.total_free(P100)) == (0, 5)
    assert free.find_mixed([V100, P100], 6) is None
    free.release(p)
    assert (free.total_free(V100), free.total_free(P100)) == (4, 8)
    assert free.capacity(P100) == 8


# -- the predicted speed -------------------------------------------------------------------------

def _brute_force_steps_per_s(rates: dict[str, float], mix: tuple[tuple[str, int], ...],
                             bs: int, gang: int) -> float:
    """Best integer split of ``bs·gang`` samples, every split tried (tiny cases only)."""
    devices = [rates[f] * bs for f, n in mix for _ in range(n)]  # samples/s per GPU
    total = bs * gang
    best = math.inf
    for split in itertools.product(range(total + 1), repeat=len(devices) - 1):
        last = total - sum(split)
        if last < 0:
            continue
        t = max(b / v for b, v in zip((*split, last), devices, strict=True))
        best = min(best, t)
    return 1.0 / best


@pytest.mark.parametrize("mix", [((K80, 1), (V100, 2)), ((P100, 2), (V100, 1)),
                                 ((K80, 2), (P100, 1))])
def test_speed_from_per_flavor_rates_equals_brute_force(mix: tuple[tuple[str, int], ...]) -> None:
    rates = {V100: 3.0, P100: 2.0, K80: 0.7}
    job = make_job("a", 3, job_type="Toy (batch size 4)")
    pred = MixedRates(lambda _j, f: rates[f], resolve_flavor).predict(job, mix)
    assert pred.steps_per_s == pytest.approx(_brute_force_steps_per_s(rates, mix, 4, 3))
    assert pred.steps_per_s <= pred.bound_steps_per_s + 1e-12
    assert pred.source == "per-flavor speeds"


def test_a_homogeneous_mix_runs_at_the_measured_speed() -> None:
    c = make_cluster().node("v100", gpus=8).build()
    o = _oracle(c)
    job = make_job("a", 8)
    assert o.mixed_rate(job, ((V100, 8),)) == pytest.approx(o.rate(job, V100, False))


def test_mixed_speed_lies_between_its_flavors() -> None:
    c = make_cluster().node("v100", gpus=4).node("k80", gpus=4).build()
    o = _oracle(c)
    job = make_job("a", 8)
    mixed = o.mixed_rate(job, ((K80, 4), (V100, 4)))
    assert o.rate(job, K80, False) < mixed < o.rate(job, V100, False)


def test_cost_model_route_for_jobs_that_name_a_profiled_model() -> None:
    c = make_cluster().node("v100", gpus=4).node("v100-32gb", gpus=4).build()
    o = _oracle(c)
    job = make_job("a", 8, job_type="ResNet-50 (batch size 64)",
                   model="imagenet", batch_size=512)
    pred = o._mixed_rates().predict(job, ((_V100_16GB, 4), (_V100_32GB, 4)))
    assert pred.source == "planner cost model (imagenet)"
    # Same silicon on both sides: the planner predicts the anchor's own measured speed.
    assert pred.steps_per_s == pytest.approx(o.rate(job, V100, False), rel=1e-6)


def test_cost_model_route_never_beats_the_measured_bound() -> None:
    from tessera.perf.sia_table import sia_throughputs
    from tessera.workload import load_trace

    c = make_cluster().node("a100-40gb", gpus=4).node("v100", gpus=4).node("t4", gpus=4).build()
    o = ThroughputOracle(sia_throughputs(), c)
    golden = Path(__file__).resolve().parents[1] / "data" / "workload" / "sia_small.csv"
    job = load_trace(golden, throughputs=sia_throughputs()).jobs[0]  # cifar10 on 6 GPUs
    mixes = [((_A100_40GB, 4), (_V100_16GB, 2)), ((_A100_40GB, 2), (_T4, 4)),
             ((_T4, 2), (_V100_16GB, 4))]
    for mix in mixes:
        pred = o._mixed_rates().predict(job, mix)
        assert pred.source == "planner cost model (cifar10)"
        assert 0 < pred.steps_per_s <= pred.bound_steps_per_s


def test_a_mix_that_is_not_the_gang_is_an_error() -> None:
    with pytest.raises(SpecError, match="does not hold its 4 GPUs"):
        MixedRates(lambda _j, _f: 1.0, resolve_flavor).predict(make_job("a", 4), ((V100, 3),))


def test_local_batch_comes_from_the_job_type() -> None:
    assert local_batch_of(make_job("a", job_type=RESNET)) == 64
    assert local_batch_of(make_job("a", job_type="my-model")) == 32


def test_agnostic_view_sees_the_reference_speed_on_any_mix() -> None:
    c = make_cluster().node("v100", gpus=4).node("k80", gpus=4).build()
    blind = _oracle(c).as_agnostic()
    job = make_job("a", 8)
    assert blind.mixed_rate(job, ((K80, 4), (V100, 4))) == pytest.approx(
        _oracle(c).rate(job, V100, False))


# -- the decision ------------------------------------------------------------------------------

def test_a_job_no_flavor_can_hold_starts_on_a_mix() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()
    out = _decide(c, view(make_job("a", 8)))
    p = out.placements["a"]
    assert p.is_mixed and p.flavor_counts() == ((P100, 4), (V100, 4))


def test_without_the_option_it_waits() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()
    out = _decide(c, view(make_job("a", 8)), options=PlacementOptions())
    assert not out.placements and out.pending["a"].kind is PendingKind.CAPACITY


def test_locality_is_never_given_up_for_a_mix() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()
    out = _decide(c, view(make_job("a", 8, requires_locality=True)))
    assert not out.placements


def test_a_mix_too_slow_for_the_job_waits() -> None:
    # 1 V100 + 3 K80 for a job that runs on 4 V100 when those free up: under half its speed.
    c = make_cluster().node("v100", gpus=4).node("k80", gpus=3).build()
    busy = view(make_job("busy", 3, steps=50), JobState.RUNNING,
                Placement.of(V100, (("v100-16gb-0000", 3),)), progress_rate=1.0)
    out = _decide(c, busy, view(make_job("a", 4, submit_s=1)))
    assert "a" not in out.placements


def test_waiting_wins_when_the_fast_flavor_frees_up_soon() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()
    o = _oracle(c)
    job = make_job("a", 4, steps=1e6, submit_s=1)
    mixed = o.mixed_rate(job, ((P100, 2), (V100, 2)))
    soon = 1e6 / mixed - 1e6 / o.rate(job, V100, True)  # the mix's loss, in seconds
    for busy_steps, starts in ((0.5 * soon, False), (2.0 * soon, True)):
        busy = view(make_job("busy", 2, steps=busy_steps), JobState.RUNNING,
                    Placement.of(V100, (("v100-16gb-0000", 2),)), progress_rate=1.0)
        other = view(make_job("other", 2, steps=1e9), JobState.RUNNING,
                     Placement.of(P100, (("p100-0000", 2),)), progress_rate=1.0)
        out = _decide(c, busy, other, view(job), options=PlacementOptions(
            mixed_gangs=True, mixed_min_speed=0.1))
        assert ("a" in out.placements) is starts


def test_a_mix_does_not_pass_a_higher_ranked_waiting_job() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()
    head = make_job("head", 8, requires_locality=True)  # can only wait
    out = _decide(c, view(head), view(make_job("b", 6, submit_s=1)))
    assert "b" not in out.placements


def test_a_running_mix_moves_to_one_flavor_when_it_frees_up() -> None:
    c = make_cluster().node("v100", gpus=4).node("k80", gpus=4).build()
    p = Placement.mixed((("v100-16gb-0000", V100, 2), ("k80-0000", K80, 2)))
    running = view(make_job("a", 4, steps=1e6), JobState.RUNNING, p, progress_rate=1.0,
                   progress_from_s=-3600.0)  # (past its lease: a move may stop it)
    out = _decide(c, running, policy="hetero_srpt")
    moved = out.placements["a"]
    assert "a" in out.started and not moved.is_mixed and moved.flavor == V100


def test_a_running_mix_keeps_its_gpus_under_a_round_based_policy() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()
    p = Placement.mixed((("v100-16gb-0000", V100, 4), ("p100-0000", P100, 4)))
    running = view(make_job("a", 8, steps=1e6), JobState.RUNNING, p, progress_rate=1.0)
    out = _decide(c, running, policy="max_min_fairness")
    assert out.placements["a"] == p and "a" not in out.started


def test_feasibility_counts_the_flavors_together_only_for_mixed_gangs() -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).build()
    o = _oracle(c)
    assert "of one flavor" in (infeasibility(make_job("a", 8), c, o) or "")
    assert infeasibility(make_job("a", 8), c, o, mixed_gangs=True) is None
    assert "have 8 together" in (infeasibility(make_job("a", 9), c, o, mixed_gangs=True) or "")
