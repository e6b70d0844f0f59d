"""Cheaper bootstrap profiles (issue 35 part 3): ``lean`` (one idle GPU of each flavor at
once, never waiting, a 1-GPU job's profile trains it) and ``free`` (the zero-cost bound)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.bootstrap import BootstrapProfiles
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator, simulate
from tests.builders import RECO, RESNET, make_cluster, make_job, make_workload
from tests.cli.runner import run_tessera

T = default_throughputs()
V100, K80 = resolve_flavor("v100"), resolve_flavor("k80")
CLUSTER = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
EVENTS = SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events")
# Recommendation runs 1.5x faster on a K80 than on a V100; its prior says the opposite.
JOB = make_job("a", job_type=RECO, steps=T.throughput(RECO, K80) * 1000)


def _boot(mode: str, **kw: object) -> SimConfig:
    return SimConfig(scheduler=EVENTS, speeds="learned", sample_every_s=100.0,
                     bootstrap_s=300.0, bootstrap_mode=mode, **kw)  # type: ignore[arg-type]


def test_lean_profiles_every_flavor_at_once_and_the_fastest_replica_trains_the_job() -> None:
    sim = Simulator(make_workload(JOB), CLUSTER, make_policy("hetero_srpt"), _boot("lean"), T)
    r = sim.run()
    (job,) = r.jobs
    # 300 s on the V100 and the K80 at once (the K80 replica's 300 s of work are the job's),
    # then the 700 s left on the K80: 1000 s, against 1600 s for the serial profiles
    assert job.jct_s == pytest.approx(1000.0)
    assert r.extras["bootstrap_gpu_h"] == pytest.approx(600 / 3600)  # two GPUs for 300 s
    assert any("2 profiles run" in n for n in r.notes)
    assert sim.learned is not None
    seen = {f.flavor: f.consolidated for f in sim.learned.rates(JOB)}
    assert seen[V100] == pytest.approx(T.throughput(RECO, V100))
    assert seen[K80] == pytest.approx(T.throughput(RECO, K80))
    assert any("0.0 % at its first decision" in n for n in r.notes)


def test_a_lean_profile_never_waits_and_a_short_job_may_finish_in_it() -> None:
    # "b" holds the only K80 for 1000 s; "a" profiles on the idle V100 alone (serial: it
    # waited for the K80, finishing after 1300 s), and its 100 K80-seconds of work take
    # 150 s on the V100: the profile trains it to the end
    busy = make_job("b", job_type=RESNET, steps=T.throughput(RESNET, K80) * 1000,
                    flavors=("k80",))
    late = make_job("a", job_type=RECO, steps=T.throughput(RECO, K80) * 100, submit_s=1.0)
    r = simulate(make_workload(busy, late), CLUSTER, "fifo", _boot("lean"))
    a = next(j for j in r.jobs if j.job_id == "a")
    assert a.finish_s == pytest.approx(1.0 + 100 * T.throughput(RECO, K80)
                                       / T.throughput(RECO, V100))
    assert r.summary.succeeded == 2


def test_a_lean_profile_that_finds_no_idle_gpu_ends_the_profiling() -> None:
    both = make_job("b", job_type=RESNET, steps=T.throughput(RESNET, K80, 2) * 1000, gpus=2,
                    flavors=("k80",))
    two = make_cluster().node("k80", gpus=2).build()
    # b's profile is its own 2-GPU gang (300 s of its work, 600 GPU-s), then b holds both
    # K80s until 1000 s; "a" arrives at 400 s, finds no idle GPU, skips its profile and
    # queues as itself at once
    late = make_job("a", job_type=RECO, steps=T.throughput(RECO, K80) * 100, submit_s=400.0)
    r = simulate(make_workload(both, late), two, "fifo", _boot("lean"))
    a = next(j for j in r.jobs if j.job_id == "a")
    assert r.extras["bootstrap_gpu_h"] == pytest.approx(600 / 3600)  # b's profile alone
    assert a.first_start_s == pytest.approx(1000.0)
    assert a.jct_s == pytest.approx(1000.0 - 400.0 + 100.0)


def test_a_gangs_lean_profile_is_its_own_gang_on_each_flavor_at_once() -> None:
    two = make_cluster().node("v100", gpus=2).node("k80", gpus=2).build()
    gang = make_job("g", job_type=RESNET, gpus=2, steps=T.throughput(RESNET, V100, 2) * 1000)
    sim = Simulator(make_workload(gang), two, make_policy("hetero_srpt"), _boot("lean"), T)
    r = sim.run()
    # 2 V100s and 2 K80s for 300 s at once; the V100 gang's 300 s are the job's, then the
    # 700 s left on the V100s (serial: a 1-GPU profile per flavor, then all 1000 s)
    assert r.jobs[0].jct_s == pytest.approx(1000.0)
    assert r.extras["bootstrap_gpu_h"] == pytest.approx(4 * 300 / 3600)
    assert sim.learned is not None  # (its own gang was measured: no scaling guess left)
    seen = {f.flavor: f.consolidated for f in sim.learned.rates(gang)}
    assert seen[K80] == pytest.approx(T.throughput(RESNET, K80, 2))
    assert seen[V100] == pytest.approx(T.throughput(RESNET, V100, 2))
    serial = simulate(make_workload(gang), two, "hetero_srpt", _boot("serial"))
    assert serial.jobs[0].jct_s == pytest.approx(300.0 + 300.0 + 1000.0)


def test_a_gangs_lean_profile_gathers_its_gpus_over_one_gpu_servers() -> None:
    # one-GPU servers (Gavel's cluster): the 2-GPU profile takes two of them per flavor,
    # spread, and runs at the spread rate there
    ones = (make_cluster().node("v100", gpus=1).node("v100", gpus=1).node("k80", gpus=1)
            .node("k80", gpus=1).build())
    gang = make_job("g", job_type=RESNET, gpus=2,
                    steps=T.throughput(RESNET, V100, 2, consolidated=False) * 1000)
    r = simulate(make_workload(gang), ones, "hetero_srpt", _boot("lean"))
    assert r.extras["bootstrap_gpu_h"] == pytest.approx(4 * 300 / 3600)
    assert r.jobs[0].jct_s == pytest.approx(1000.0)


def test_free_profiles_cost_nothing_and_teach_everything() -> None:
    sim = Simulator(make_workload(JOB), CLUSTER, make_policy("hetero_srpt"), _boot("free"), T)
    r = sim.run()
    assert r.jobs[0].jct_s == pytest.approx(1000.0)  # on the K80 at once
    assert r.extras.get("bootstrap_gpu_h", 0.0) == 0.0
    assert any("0.0 % at its first decision" in n for n in r.notes)


def test_an_oracle_bootstrap_leaves_a_gang_no_estimate_error() -> None:
    two = make_cluster().node("v100", gpus=2).node("k80", gpus=2).build()
    gang = make_job("g", job_type=RESNET, gpus=2, steps=T.throughput(RESNET, V100, 2) * 1000)
    free = simulate(make_workload(gang), two, "hetero_srpt", _boot("free"))
    oracle = simulate(make_workload(gang), two, "hetero_srpt", _boot("oracle"))
    assert not any("0.0 % at its first decision" in n for n in free.notes)  # (its scaling)
    assert any("0.0 % at its first decision" in n for n in oracle.notes)
    assert oracle.extras.get("bootstrap_gpu_h", 0.0) == 0.0


def test_lean_profiles_train_the_job_in_gavels_loop_too() -> None:
    cfg = SimConfig(compat="gavel", speeds="learned", bootstrap_s=300.0)
    serial = simulate(make_workload(JOB), CLUSTER, "max_min_fairness", cfg)
    lean = simulate(make_workload(JOB), CLUSTER, "max_min_fairness",
                    cfg.model_copy(update={"bootstrap_mode": "lean"}))
    assert lean.extras["bootstrap_gpu_h"] == pytest.approx(600 / 3600)
    # the profiles' 600 s hold 500 K80-seconds of the job's work (how much of it the
    # policy's allocation then saves depends on its rounds: at least half here)
    assert lean.jobs[0].jct_s is not None and serial.jobs[0].jct_s is not None
    assert lean.jobs[0].jct_s < serial.jobs[0].jct_s - 250.0


def test_bad_bootstrap_modes_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValidationError, match="bootstrap_mode"):
        SimConfig(speeds="learned", bootstrap_s=60.0, bootstrap_mode="parallel")  # type: ignore[arg-type]
    truth = Simulator(make_workload(JOB), CLUSTER, make_policy("fifo"), _boot("lean"), T)
    assert truth.learned is not None
    with pytest.raises(SpecError, match="bootstrap mode 'x'"):
        BootstrapProfiles(60.0, truth.world.truth, truth.learned, mode="x")  # type: ignore[arg-type]
    small = ["simulate", "-t", "philly", "--limit", "5", "-c", "v100:4", "-p", "fifo",
             "--no-plots", "--speeds", "learned"]
    code, _out, err = run_tessera([*small, "--bootstrap-s", "60", "--bootstrap-mode", "x"],
                                  capsys, monkeypatch)
    assert code != 0
    assert "--bootstrap-mode 'x': serial, lean, free or oracle" in " ".join(err.split())
    code, _out, err = run_tessera([*small, "--bootstrap-mode", "lean"], capsys, monkeypatch)
    assert code != 0 and "--bootstrap-mode lean needs --bootstrap-s" in " ".join(err.split())
