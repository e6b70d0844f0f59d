"""Elastic jobs in the simulator: progress at goodput, restarts charged per model and counted,
speed re-evaluated, rigid jobs untouched, bad inputs explained."""

from __future__ import annotations

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.decide import Decision
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Placement
from tessera.sched.elastic.goodput import RESCALE_S, RESTART_S
from tessera.sim.config import FailureConfig, SimConfig
from tessera.sim.engine import simulate
from tessera.sim.events import COMPLETE, FAIL
from tessera.sim.world import SimWorld
from tessera.workload.elastic import elastic_range, sia_calibrated
from tests.builders import make_cluster, make_job, make_workload

_A100_40GB = resolve_flavor("A100-40GB")

TYPE = "cifar10 (batch size 129)"


def _cluster():  # type: ignore[no-untyped-def]
    return make_cluster().node(_A100_40GB, gpus=8).build()


def _world(*jobs, policy: str = "sia"):  # type: ignore[no-untyped-def]
    c = _cluster()
    table = sia_throughputs()
    world = SimWorld(make_workload(*jobs), c, make_policy(policy), SimConfig(),
                     ThroughputOracle(table, c), rounds=True)
    events: list[tuple[float, int, int, int]] = []
    world.schedule = lambda t, k, i, e: events.append((t, k, i, e))
    return world, events


def _place(world, job, p, t_s):  # type: ignore[no-untyped-def]
    world.apply(Decision({job.spec.job_id: p}, (job.spec.job_id,), (), {}), t_s)


def _gang(world, n: int, batch: int) -> Placement:  # type: ignore[no-untyped-def]
    return Placement.of(resolve_flavor("A100-40GB"), ((world.cluster.nodes[0].node_id, n),),
                     global_batch_samples=batch)


def test_an_elastic_job_progresses_at_goodput_and_pays_its_restarts() -> None:
    spec = make_job("a", 1, steps=1e6, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    world, events = _world(spec)
    job = world.jobs[0]
    world.arrive(job, 0.0)
    four = _gang(world, 4, 2048)
    _place(world, job, four, 0.0)
    restart = RESCALE_S["cifar10"]  # what Sia's simulator charges, not its policy's 30 s
    assert restart == 50.0 and RESTART_S["cifar10"] == 30.0
    assert job.progress_from_s == restart  # the first start pays the restart too
    rate = world.elastic.model.steps_per_s(spec, four, 0.0)
    assert job.rate == pytest.approx(rate) and rate > 0
    assert events[-1][1] == COMPLETE and events[-1][0] == pytest.approx(restart + 1e6 / rate)
    world.tick(1000.0, True)
    world.snapshot(1000.0)
    two = _gang(world, 2, 2048)
    _place(world, job, two, 1000.0)
    assert (job.resizes, job.migrations) == (1, 0)
    assert job.progress_from_s == 1000.0 + restart
    assert job.remaining == pytest.approx(1e6 - rate * (1000.0 - restart))
    assert job.attained_gpu_s == pytest.approx(4 * 1000.0)  # the gang's GPUs, not the spec's


def test_a_move_at_the_same_count_is_a_migration_and_a_preemption_pays_the_model_restart(
) -> None:
    spec = make_job("b", 1, steps=1e6, job_type=TYPE, elastic=elastic_range("bert", 1, 384))
    world, _events = _world(spec)
    job = world.jobs[0]
    world.arrive(job, 0.0)
    _place(world, job, _gang(world, 2, 384), 0.0)
    world.snapshot(500.0)
    other = Placement.of(resolve_flavor("A100-40GB"), ((world.cluster.nodes[0].node_id, 2),),
                      global_batch_samples=768)
    _place(world, job, other, 500.0)
    assert (job.resizes, job.migrations) == (0, 1)
    world.apply(Decision({}, (), (job.spec.job_id,), {}), 900.0)
    assert job.preemptions == 1 and job.startup_s == RESCALE_S["bert"]


def test_speed_is_re_evaluated_as_efficiency_changes() -> None:
    spec = make_job("a", 1, steps=1e6, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    world, events = _world(spec)
    job = world.jobs[0]
    world.arrive(job, 0.0)
    _place(world, job, _gang(world, 8, 4096), 0.0)
    first, epoch = job.rate, job.epoch
    job.remaining = 2e5  # 80 % through training: a later epoch, other gradient statistics
    world.apply(Decision({}, (), (), {}), 100.0)
    assert job.rate != first and job.epoch == epoch + 1
    assert events[-1][1:] == (COMPLETE, job.idx, job.epoch)


def test_rigid_jobs_under_an_elastic_policy_run_at_their_count_and_table_speed() -> None:
    # a job with no elastic range (a model without efficiency data) runs rigid
    rigid = make_job("r", 2, steps=1e4, job_type=TYPE)
    res = simulate(make_workload(rigid), _cluster(), "sia",
                   SimConfig(scheduler=SchedulerSettings(round_s=60.0)), sia_throughputs())
    rec = res.jobs[0]
    assert rec.outcome == "succeeded" and rec.resizes == 0 and res.summary.resizes == 0
    rate = ThroughputOracle(sia_throughputs(), _cluster()).rate(rigid, _A100_40GB, True)
    busy = float(rec.gpu_s_by_flavor.split("=")[1])
    # booked in whole seconds; no restart: it started once, as rigid jobs always have
    assert busy == pytest.approx(2 * 1e4 / rate, abs=1.0)


def test_an_elastic_minimum_above_the_cluster_is_rejected_with_the_reason() -> None:
    e = elastic_range("cifar10", 16, 2048, min_gpus=16)
    res = simulate(make_workload(make_job("x", 16, job_type=TYPE, elastic=e)), _cluster(), "sia",
                   SimConfig(scheduler=SchedulerSettings(round_s=60.0)), sia_throughputs())
    assert res.jobs[0].outcome == "rejected"
    assert "elastic range needs at least 16 GPUs" in res.jobs[0].reason


def test_a_run_resizes_and_finishes_every_job_deterministically() -> None:
    jobs = [make_job(f"j{i}", 1, steps=2e4, submit_s=300.0 * i, job_type=TYPE,
                     elastic=elastic_range("cifar10", 1, 2048)) for i in range(4)]
    cfg = SimConfig(scheduler=SchedulerSettings(round_s=60.0))
    runs = [simulate(make_workload(*jobs), _cluster(), p, cfg, sia_throughputs())
            for p in ("sia", "sia", "pollux", "goodput_srpt")]
    assert runs[0].jobs == runs[1].jobs
    for r in runs:
        assert r.summary.succeeded == 4 and r.summary.resizes > 0
        assert r.summary.resizes == sum(j.resizes for j in r.jobs)
        assert r.as_dict()["resizes"] == r.summary.resizes


def test_calibration_slows_the_true_speed_and_the_rigid_work_alike() -> None:
    spec = make_job("a", 1, steps=1e6, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    cal = sia_calibrated(make_workload(spec)).jobs[0]
    assert cal.total_steps == pytest.approx(1.8e6) and cal.elastic is not None
    assert cal.elastic.slowdown == pytest.approx(1.8)
    world, _ = _world(spec)
    p = _gang(world, 4, 2048)
    plain = world.elastic.model.steps_per_s(spec, p, 0.0)
    slow = world.elastic.model.steps_per_s(cal, p, 0.0)
    # same samples/s in Pollux's units, 1.8x the steps per sample: the time to finish grows 1.8x
    assert cal.total_steps / slow == pytest.approx(1.8 * spec.total_steps / plain)


def test_a_job_at_its_own_size_keeps_running_without_a_restart() -> None:
    spec = make_job("a", 1, steps=2e5, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    res = simulate(make_workload(spec), _cluster(), "sia",
                   SimConfig(scheduler=SchedulerSettings(round_s=60.0)), sia_throughputs())
    rec = res.jobs[0]
    assert rec.outcome == "succeeded"
    # alone it doubles 1 -> 2 -> 4 -> 8 GPUs (three resizes) and then stays put
    assert rec.resizes == 3 and rec.migrations == 0 and rec.preemptions == 0
    assert JobState.SUCCEEDED.value == rec.outcome


def test_a_speed_change_re_books_the_runs_failure_with_its_completion() -> None:
    # Re-booking the completion gives the run a new epoch; the failure booked under the old
    # one used to be dropped as stale, so a resized-in-place elastic job never failed.
    spec = make_job("a", 1, steps=1e6, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    world, events = _world(spec)
    job = world.jobs[0]
    job.flaky = True  # its first run fails (uniform model: at a point of the run)
    world.arrive(job, 0.0)
    _place(world, job, _gang(world, 8, 4096), 0.0)
    fail_s = job.fail_at_s
    assert fail_s is not None and events[-1] == (fail_s, FAIL, job.idx, job.epoch)
    job.remaining = 2e5  # a later epoch: other statistics, a new speed at the next round
    t_s = min(100.0, fail_s / 2)
    world.apply(Decision({}, (), (), {}), t_s)
    assert events[-2][1:] == (COMPLETE, job.idx, job.epoch)
    assert events[-1] == (fail_s, FAIL, job.idx, job.epoch)  # same time, the live epoch


def test_an_elastic_jobs_failure_strikes_after_its_speed_changed() -> None:
    spec = make_job("a", 1, steps=2e5, job_type=TYPE, elastic=elastic_range("cifar10", 1, 2048))
    cfg = SimConfig(scheduler=SchedulerSettings(round_s=60.0),
                    failures=FailureConfig(job_failure_rate=1.0, repeat_probability=0.0))
    res = simulate(make_workload(spec), _cluster(), "sia", cfg, sia_throughputs())
    rec = res.jobs[0]
    # alone it is resized 1 -> 2 -> 4 -> 8 GPUs, each round re-evaluating its speed; its
    # first run's failure must still strike (then it retries and succeeds)
    assert rec.outcome == "succeeded" and rec.failures == 1
