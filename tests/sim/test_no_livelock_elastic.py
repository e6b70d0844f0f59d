"""No elastic policy livelocks either: Sia, Pollux and goodput_srpt over elastic and rigid jobs,
short rounds and costly swaps (issue 31).

The lease (:func:`tessera.sched.core.cadence.leased`) does not apply to an elastic allocation:
those policies choose every job's GPU count each round and weigh restarts in their own goodput
(Sia's and Pollux's restart damping, ``goodput_srpt``'s). So an elastic policy could thrash --
resize a job every round, each resize costing its model's checkpoint-restore (Sia's simulator's
``RESCALE_S``: 15-250 s), with no progress in between. This module checks that none does, with
the bound of :mod:`tests.sim.test_no_livelock` written for elastic jobs:

    T = last submission + Σ_j (2·d_j + c_j + r) + r

with ``d_j`` a job's work at the slowest speed it can get (an elastic job: its goodput on the
fewest GPUs any flavor here runs it on, at the least favourable point of its progress; a rigid
job: its table speed on its slowest flavor), ``c_j`` what a start costs it (an elastic job: its
model's restart; a rigid one: checkpoint + restore) and ``r`` the round. A policy that resized
a job every round without progress would leave it unfinished at ``T``, or stop the simulator
with its no-progress error; the simulation runs with this horizon, so a livelock never hangs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobSpec
from tessera.perf.efficiency import load_efficiency
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Placement
from tessera.sched.elastic.goodput import GoodputModel, rescale_s
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload.elastic import elastic_range
from tests.builders import make_cluster, make_job, make_workload

ELASTIC_POLICIES = ["sia", "pollux", "goodput_srpt"]
T = sia_throughputs()
#: Models with efficiency curves, and the local batch of their rigid job type here.
MODELS = {"cifar10": 129, "bert": 8, "deepspeech2": 20, "yolov3": 8, "imagenet": 57,
          "ncf": 91}
FLAVORS = (resolve_flavor("A100-40GB"), resolve_flavor("T4"))
PROGRESS = [i / 10 for i in range(11)]


def _cluster() -> ClusterSpec:
    """Two GPUs of each of two of Sia's flavors: few enough that jobs are resized."""
    return make_cluster().node(FLAVORS[0], gpus=2).node(FLAVORS[1], gpus=2).build()


def _job_type(model: str) -> str:
    return f"{model} (batch size {MODELS[model]})"


def _elastic_rate(model: GoodputModel, spec: JobSpec, flavor: GpuFlavor, gpus: int,
                  cluster: ClusterSpec) -> float:
    """The slowest an elastic job runs on ``gpus`` GPUs of ``flavor`` over its progress
    (0: never measured there)."""
    e = spec.elastic
    assert e is not None
    node = next(n.node_id for n in cluster.nodes if n.flavor is flavor)
    p = Placement.of(flavor, ((node, gpus),), global_batch_samples=e.initial_batch_samples)
    rates = [model.steps_per_s(spec, p, f * e.target_samples) for f in PROGRESS]
    return 0.0 if min(rates) <= 0 else min(rates)


def _slowest(spec: JobSpec, cluster: ClusterSpec, model: GoodputModel) -> float:
    """Steps/s at the slowest speed ``spec`` can get here (see the module docstring)."""
    if spec.elastic is None:
        return min(r.consolidated for r in ThroughputOracle(T, cluster).real_rates(spec))
    rates = []
    for f in FLAVORS:
        for g in range(spec.elastic.min_gpus, 3):
            if (r := _elastic_rate(model, spec, f, g, cluster)) > 0:
                rates.append(r)
                break  # (more GPUs of a flavor run a job faster than its fewest)
    assert rates, f"{spec.job_id} runs nowhere here"
    return min(rates)


def _bound_s(jobs: list[JobSpec], cluster: ClusterSpec, swap_s: float, round_s: float) -> float:
    """``T`` of the module docstring."""
    model = GoodputModel()
    total = 0.0
    for j in jobs:
        d = j.total_steps / _slowest(j, cluster, model)
        c = rescale_s(j.elastic) if j.elastic is not None else swap_s
        total += 2 * d + c + round_s
    return max(j.submit_time_s for j in jobs) + total + round_s


def _jobs(models: list[str], elastic: list[bool], gaps_s: list[float], minutes: list[int],
          ) -> list[JobSpec]:
    """Jobs of ``models``, elastic or rigid, of about ``minutes`` each on one A100."""
    cluster, model = _cluster(), GoodputModel()
    out, t = [], 0.0
    for i, m in enumerate(models):
        t += gaps_s[i]
        jt = _job_type(m)
        if elastic[i]:
            # An elastic job's length is its target in samples over its goodput (its steps
            # only count the way there): the target is cut to ``minutes`` on one A100.
            e = elastic_range(m, 1, load_efficiency(m).initial_batch_samples, max_gpus=4)
            probe = make_job("probe", 1, steps=e.target_samples, job_type=jt, elastic=e)
            samples_per_s = _elastic_rate(model, probe, FLAVORS[0], 1, cluster) or \
                _elastic_rate(model, probe, FLAVORS[0], 2, cluster)
            target = samples_per_s * 60 * minutes[i]
            out.append(make_job(f"e{i}", 1, steps=target, submit_s=t, job_type=jt,
                                elastic=replace(e, target_samples=target)))
        else:
            rate = T.throughput(jt, FLAVORS[0])
            out.append(make_job(f"r{i}", 1, steps=rate * 60 * minutes[i], submit_s=t,
                                job_type=jt))
    return out


def _run(jobs: list[JobSpec], policy: str, round_s: float, checkpoint_s: float,
         restore_s: float) -> None:
    """Simulate ``jobs`` under ``policy`` up to the bound; every job must be done by then."""
    cluster = _cluster()
    sched = SchedulerSettings(round_s=round_s, checkpoint_s=checkpoint_s, restore_s=restore_s)
    horizon = _bound_s(jobs, cluster, sched.migration_cost_s, round_s)
    r = simulate(make_workload(*jobs), cluster, policy,
                 SimConfig(scheduler=sched, max_sim_time_s=horizon), T)
    late = [j.job_id for j in r.jobs if j.finish_s is None or j.finish_s > horizon]
    assert not late, f"{policy}: {late} not done by the bound {horizon:.0f} s"
    assert r.summary.succeeded == len(jobs)


#: Every model, elastic and rigid, arriving together and then in a trickle.
BUSY = _jobs(["cifar10", "bert", "deepspeech2", "yolov3", "imagenet", "ncf", "cifar10", "bert"],
             [True, True, True, True, True, False, False, True],
             [0, 0, 0, 30, 0, 200, 10, 60], [30, 20, 45, 15, 25, 40, 10, 20])


@pytest.mark.parametrize("policy", ELASTIC_POLICIES)
@pytest.mark.parametrize(("round_s", "checkpoint_s", "restore_s"),
                         [(60.0, 30.0, 30.0), (5.0, 60.0, 90.0)])
def test_every_elastic_policy_finishes_with_short_rounds(
        policy: str, round_s: float, checkpoint_s: float, restore_s: float) -> None:
    _run(BUSY, policy, round_s, checkpoint_s, restore_s)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(ELASTIC_POLICIES),
    models=st.lists(st.sampled_from(sorted(MODELS)), min_size=1, max_size=7),
    elastic=st.lists(st.booleans(), min_size=7, max_size=7),
    gaps=st.lists(st.floats(0, 900), min_size=7, max_size=7),
    minutes=st.lists(st.integers(1, 60), min_size=7, max_size=7),
    round_s=st.sampled_from([5.0, 20.0, 30.0, 60.0, 90.0, 360.0]),
    checkpoint_s=st.sampled_from([0.0, 10.0, 30.0, 60.0]),
    restore_s=st.sampled_from([0.0, 10.0, 30.0, 90.0]),
)
def test_property_every_elastic_policy_finishes_within_the_bound(
    policy: str, models: list[str], elastic: list[bool], gaps: list[float],
    minutes: list[int], round_s: float, checkpoint_s: float, restore_s: float,
) -> None:
    _run(_jobs(models, elastic, gaps, minutes), policy, round_s, checkpoint_s, restore_s)


def test_an_elastic_policy_that_resized_every_round_would_be_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: an elastic allocation that resizes its job every round (1, 2,
    1, ... GPUs), with rounds (20 s) shorter than the model's restart (cifar10: 50 s), never
    lets it progress; the round driver stops with its no-progress error, naming ``--round-s``,
    instead of spinning (the lease does not hold elastic allocations, so nothing else would)."""
    from tessera.errors import SpecError
    from tessera.sched.elastic.sizes import ElasticSize
    from tessera.sched.policies.goodput_srpt import GoodputSrpt

    rank = GoodputSrpt.rank
    flip = {"n": 0}

    def thrash(self, ctx):  # type: ignore[no-untyped-def]
        r = rank(self, ctx)
        flip["n"] += 1
        gpus = 1 + flip["n"] % 2
        return replace(r, sizes={jid: ElasticSize(gpus, s.global_batch_samples)
                                 for jid, s in r.sizes.items()})

    monkeypatch.setattr(GoodputSrpt, "rank", thrash)
    jobs = _jobs(["cifar10"], [True], [0.0], [30])
    with pytest.raises(SpecError, match=r"no job progressed in \d+ rounds .*--round-s 20 s"):
        _run(jobs, "goodput_srpt", 20.0, 30.0, 30.0)
