"""Co-location in Tessera's own drivers (``sim/sharing.py``): shared gangs booked once, pairs
at their measured speeds, refusals, and the books after every decision of whole runs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import Workload
from tessera.perf.colocation import PairRates, pair_rates
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.sched.catalog import gavel_loop_only, make_policy
from tessera.sched.core.decide import Decision
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator, simulate
from tessera.sim.metrics import SimResult
from tessera.sim.sharing import SharingWorld
from tessera.sim.world import SimWorld
from tests.builders import make_cluster, make_job, make_workload

_V100_16GB = resolve_flavor("V100-16GB")

T = default_throughputs()
R18_16 = "ResNet-18 (batch size 16)"
R18_64 = "ResNet-18 (batch size 64)"
FREE = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0.0, restore_s=0.0))
TYPES = (R18_16, R18_64, "ResNet-50 (batch size 64)", "Transformer (batch size 64)",
         "A3C", "CycleGAN", "Recommendation (batch size 1024)", "LM (batch size 20)")


class _Audit:
    """Wraps a world's ``apply``: checks the books after every decision, counts pairs."""

    def __init__(self, world: SimWorld) -> None:
        assert isinstance(world, SharingWorld)
        self.world = world
        self.pairs = 0
        self.most_shared = 0
        self._apply = world.apply
        world.apply = self  # type: ignore[method-assign]

    def __call__(self, d: Decision, t_s: float) -> object:
        out = self._apply(d, t_s)
        self.world.check_books()
        self.pairs += sum(1 for i in self.world.guests)
        per_gang: dict[tuple[object, ...], int] = {}
        for j in self.world.running.values():
            if j.idx in self.world.mate:
                key = tuple(sorted((j.idx, self.world.mate[j.idx])))
                per_gang[key] = per_gang.get(key, 0) + 1
        self.most_shared = max([self.most_shared, *per_gang.values()])
        return out


def _run(wl: Workload, cluster: ClusterSpec, policy: str, cfg: SimConfig = FREE,
         table: ThroughputTable = T) -> tuple[SimResult, _Audit]:
    sim = Simulator(wl, cluster, make_policy(policy), cfg, table)
    audit = _Audit(sim.world)
    return sim.run(), audit


def test_a_pair_runs_at_its_measured_speeds_then_alone() -> None:
    """Two jobs, one GPU: they share it from the start at the pair's measured speeds; when the
    first finishes, the other keeps the GPU and runs alone at its own speed (by hand)."""
    a = make_job("a", steps=20000, job_type=R18_16)
    b = make_job("b", steps=20000, job_type=R18_64)
    cluster = make_cluster().node("v100", gpus=1).build()
    r, audit = _run(make_workload(a, b), cluster, "hetero_pack")
    pair = pair_rates(T, a, b, _V100_16GB)
    assert isinstance(pair, PairRates)
    assert audit.pairs > 0
    t_a, t_b = a.total_steps / pair.first_steps_per_s, b.total_steps / pair.second_steps_per_s
    first, second = (a, b) if t_a <= t_b else (b, a)
    t1 = min(t_a, t_b)
    rate_second = pair.second_steps_per_s if second is b else pair.first_steps_per_s
    left = second.total_steps - rate_second * t1
    t2 = t1 + left / T.throughput(second.job_type, _V100_16GB)
    finish = {j.job_id: j.finish_s for j in r.jobs}
    assert finish[first.job_id] == pytest.approx(t1, rel=1e-9)
    assert finish[second.job_id] == pytest.approx(t2, rel=1e-9)
    assert r.summary.utilization <= 1.0 + 1e-9  # the shared GPU counted once


def test_sharing_beats_taking_turns_on_one_gpu() -> None:
    wl = make_workload(*(make_job(str(i), steps=20000, job_type=R18_16 if i % 2 else R18_64)
                         for i in range(4)))
    cluster = make_cluster().node("v100", gpus=1, count=2).build()
    packed, _ = _run(wl, cluster, "hetero_pack", SimConfig())
    plain = simulate(wl, cluster, "hetero_gittins", SimConfig())
    assert packed.summary.succeeded == plain.summary.succeeded == 4
    assert packed.summary.avg_jct_s < plain.summary.avg_jct_s


def test_pairs_without_a_measurement_never_run() -> None:
    """Without pair measurements nothing is shared: the run is hetero_gittins' own."""
    bare = ThroughputTable("no pairs", T.isolated, {})
    wl = make_workload(*(make_job(str(i), steps=20000, job_type=R18_16 if i % 2 else R18_64)
                         for i in range(6)))
    cluster = make_cluster().node("v100", gpus=1, count=2).build()
    packed, audit = _run(wl, cluster, "hetero_pack", SimConfig(), bare)
    plain = simulate(wl, cluster, "hetero_gittins", SimConfig(), bare)
    assert audit.pairs == 0
    assert [j.finish_s for j in packed.jobs] == [j.finish_s for j in plain.jobs]


def test_exclusive_jobs_never_share() -> None:
    jobs = [make_job(str(i), steps=20000, job_type=R18_16 if i % 2 else R18_64,
                     exclusive=i % 3 == 0) for i in range(6)]
    cluster = make_cluster().node("v100", gpus=1, count=2).build()
    sim = Simulator(make_workload(*jobs), cluster, make_policy("hetero_pack"), SimConfig(), T)
    world = sim.world
    assert isinstance(world, SharingWorld)
    seen: set[int] = set()
    apply = world.apply

    def watch(d: Decision, t_s: float) -> object:
        out = apply(d, t_s)
        seen.update(world.mate)
        return out

    world.apply = watch  # type: ignore[method-assign]
    r = sim.run()
    assert r.summary.succeeded == 6
    assert seen, "the non-exclusive jobs should share"
    assert not {i for i in seen if jobs[i].exclusive}


def test_gavel_packed_twins_run_in_tessera_drivers_other_gavel_only_policies_do_not() -> None:
    wl = make_workload(*(make_job(str(i), steps=20000, job_type=R18_16 if i % 2 else R18_64)
                         for i in range(4)))
    cluster = make_cluster().node("v100", gpus=1, count=2).build()
    r, audit = _run(wl, cluster, "fifo_packed", SimConfig())
    assert r.summary.succeeded == 4 and audit.pairs > 0
    with pytest.raises(SpecError, match="compat gavel"):
        simulate(wl, cluster, "allox", SimConfig())
    events = SimConfig(scheduler=SchedulerSettings(mode="events"))
    with pytest.raises(SpecError, match="rounds mode"):
        simulate(wl, cluster, "fifo_packed", events)


def test_packing_is_refused_only_where_gpus_cannot_be_shared() -> None:
    why = gavel_loop_only(make_policy("hetero_pack"))
    assert why is not None and "live service" in why and "one job per GPU" in why
    assert gavel_loop_only(make_policy("hetero_pack"), shares_gpus=True) is None


def _random_workload(data: st.DataObject) -> Workload:
    n = data.draw(st.integers(4, 14))
    jobs = []
    for i in range(n):
        jobs.append(make_job(
            str(i), gpus=data.draw(st.sampled_from((1, 1, 1, 2, 4))),
            steps=data.draw(st.floats(500.0, 40000.0)),
            submit_s=data.draw(st.floats(0.0, 4000.0)),
            job_type=data.draw(st.sampled_from(TYPES)),
            exclusive=data.draw(st.booleans()) and data.draw(st.booleans()),
        ))
    jobs.sort(key=lambda j: j.submit_time_s)
    return make_workload(*jobs)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_books_balance_after_every_decision(data: st.DataObject) -> None:
    """Whole runs on random traces, in rounds, with fills between rounds, and in events mode:
    after every decision each pair is labelled both ways on one gang, no gang holds more than
    two jobs, every node's free + booked GPUs is its capacity; every job finishes; the same
    inputs give the same run."""
    wl = _random_workload(data)
    cluster = make_cluster().node("v100", gpus=4).node("p100", gpus=2).node("k80", gpus=4).build()
    mode = data.draw(st.sampled_from(("rounds", "fill", "events")))
    sched = SchedulerSettings(mode="events" if mode == "events" else "rounds",
                              fill_between_rounds=mode == "fill")
    cfg = SimConfig(scheduler=sched)
    policy = data.draw(st.sampled_from(
        ("hetero_pack",) if mode == "events" else ("hetero_pack", "fifo_packed")))
    r, audit = _run(wl, cluster, policy, cfg)
    assert audit.most_shared <= 2
    assert r.summary.succeeded + r.summary.rejected == len(wl.jobs)
    assert r.summary.utilization <= 1.0 + 1e-9
    again, _ = _run(wl, cluster, policy, cfg)
    assert again.jobs == r.jobs
