"""Sia's bootstrap under ``--speeds learned`` (issue 35 part 1): short 1-GPU profiles per flavor,
charged as real time and GPU use, and the estimate's error over time."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.report.files import write_run_files
from tessera.sched.catalog import make_policy
from tessera.sched.core.learned import LearnedOracle, ObservedOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Snapshot
from tessera.sim.config import SimConfig, ValidationConfig
from tessera.sim.engine import Simulator, simulate
from tests.builders import RECO, RESNET, make_cluster, make_job, make_workload

T = default_throughputs()
V100, K80 = resolve_flavor("v100"), resolve_flavor("k80")
CLUSTER = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()
EVENTS = SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events")
# Recommendation runs 1.5x faster on a K80 than on a V100; its prior (the other batch sizes)
# is a few percent off.
JOB = make_job("a", job_type=RECO, steps=T.throughput(RECO, K80) * 1000)


def _learned(**kw: object) -> SimConfig:
    return SimConfig(scheduler=EVENTS, speeds="learned", sample_every_s=100.0,
                     **kw)  # type: ignore[arg-type]


def test_a_new_job_profiles_each_flavor_first_and_its_jct_includes_the_profiles() -> None:
    sim = Simulator(make_workload(JOB), CLUSTER, make_policy("hetero_srpt"),
                    _learned(bootstrap_s=300.0), T)
    r = sim.run()
    (job,) = r.jobs
    # 300 s on the V100, 300 s on the K80, then its real run on the K80 (1000 s there)
    assert job.jct_s == pytest.approx(1600.0)
    held = dict(part.split("=") for part in job.gpu_s_by_flavor.split(";"))
    assert held == {"V100-16GB": "300", "K80": "1300"}
    assert r.extras["bootstrap_gpu_h"] == pytest.approx(600 / 3600)
    # a GPU is busy the whole time: the profiles hold theirs as a job does
    assert [s.busy_gpus for s in r.samples if s.time_s < 1600] == [1] * 16
    # after its profiles the policies' estimate is the truth on both flavors
    assert sim.learned is not None
    seen = {f.flavor: f.consolidated for f in sim.learned.rates(JOB)}
    assert seen[V100] == pytest.approx(T.throughput(RECO, V100))
    assert seen[K80] == pytest.approx(T.throughput(RECO, K80))
    assert any("2 profiles run" in n for n in r.notes)
    # its first real decision already sees the truth (the profiles do not count as one)
    assert any("0.0 % at its first decision" in n for n in r.notes)


def test_without_profiles_the_same_job_starts_its_real_run_at_once() -> None:
    r = simulate(make_workload(JOB), CLUSTER, "hetero_srpt", _learned())
    assert "bootstrap_gpu_h" not in r.extras
    assert r.jobs[0].jct_s is not None and r.jobs[0].jct_s < 1600.0


def test_profiles_wait_for_a_free_gpu_of_their_flavor() -> None:
    # "b" holds the only K80 for 1000 s (one flavor allowed); "a"'s K80 profile waits for it
    busy = make_job("b", job_type=RESNET, steps=T.throughput(RESNET, K80) * 1000,
                    flavors=("k80",))
    late = make_job("a", job_type=RECO, steps=T.throughput(RECO, K80) * 100, submit_s=1.0)
    r = simulate(make_workload(busy, late), CLUSTER, "fifo", _learned(bootstrap_s=300.0))
    a = next(j for j in r.jobs if j.job_id == "a")
    assert a.finish_s is not None and a.finish_s >= 1000.0 + 300.0


def test_profiles_run_in_gavels_loop_too() -> None:
    cfg = SimConfig(compat="gavel", speeds="learned")
    plain = simulate(make_workload(JOB), CLUSTER, "max_min_fairness", cfg)
    boot = simulate(make_workload(JOB), CLUSTER, "max_min_fairness",
                    cfg.model_copy(update={"bootstrap_s": 300.0}))
    assert boot.extras["bootstrap_gpu_h"] == pytest.approx(600 / 3600)
    assert boot.jobs[0].jct_s == pytest.approx(plain.jobs[0].jct_s + 600.0)


def test_measurement_noise_is_seeded_and_moves_the_estimate() -> None:
    def seen(seed: int, noise: float) -> float:
        sim = Simulator(make_workload(JOB), CLUSTER, make_policy("fifo"),
                        _learned(bootstrap_s=300.0, measurement_noise=noise, seed=seed), T)
        sim.run()
        assert sim.learned is not None
        return sim.learned.rate(JOB, K80, True)

    true = T.throughput(RECO, K80)
    assert seen(0, 0.1) == seen(0, 0.1) != pytest.approx(true)
    assert seen(1, 0.1) != seen(0, 0.1)
    assert seen(0, 0.0) == pytest.approx(true)


def test_error_over_time_is_a_series_in_json_and_csv(tmp_path: Path) -> None:
    r = simulate(make_workload(JOB), CLUSTER, "hetero_srpt", _learned(bootstrap_s=300.0))
    first, last = r.estimate_error[0], r.estimate_error[-1]
    assert first.time_s == 0.0 and first.mean_error > 0.02 and first.jobs == 1
    assert last.time_s == 600.0 and last.mean_error == pytest.approx(0.0)
    payload = json.loads(json.dumps(r.as_dict()))
    assert payload["estimate_error"][0]["mean_error"] == pytest.approx(first.mean_error)
    write_run_files([r], tmp_path)
    rows = list(csv.DictReader((tmp_path / "estimate-error-hetero_srpt.csv").open()))
    assert [float(row["time_s"]) for row in rows] == [0.0, 600.0]
    assert float(rows[0]["p90_error"]) == pytest.approx(first.p90_error)


def test_a_table_run_has_no_error_series(tmp_path: Path) -> None:
    r = simulate(make_workload(JOB), CLUSTER, "hetero_srpt", SimConfig(scheduler=EVENTS))
    assert r.estimate_error == () and "estimate_error" not in r.as_dict()
    write_run_files([r], tmp_path)
    assert not list(tmp_path.glob("estimate-error-*"))


def test_bad_bootstrap_settings_are_refused_in_one_line() -> None:
    w = make_workload(JOB)
    with pytest.raises(SpecError, match="needs --speeds learned"):
        simulate(w, CLUSTER, "fifo", SimConfig(bootstrap_s=300.0))
    with pytest.raises(SpecError, match="needs --speeds learned"):
        simulate(w, CLUSTER, "fifo", SimConfig(measurement_noise=0.1))
    with pytest.raises(SpecError, match="cannot both be on"):
        simulate(w, CLUSTER, "fifo", _learned(bootstrap_s=300.0,
                                              validation=ValidationConfig(min_gpus=2)))
    for bad in (0.0, -5.0, float("inf"), float("nan")):
        with pytest.raises(ValidationError, match="bootstrap_s"):
            SimConfig(speeds="learned", bootstrap_s=bad)
    with pytest.raises(ValidationError, match="measurement_noise"):
        SimConfig(speeds="learned", measurement_noise=-0.1)


def test_what_cannot_learn_says_so_in_the_notes() -> None:
    w = make_workload(make_job("a", job_type=RESNET, steps=500),
                      make_job("b", job_type=RECO, steps=500))
    packed = simulate(w, CLUSTER, "hetero_pack", _learned())
    assert any("pair table" in n for n in packed.notes)
    plain = simulate(w, CLUSTER, "hetero_srpt", _learned())
    assert not any("pair table" in n or "elastic jobs" in n for n in plain.notes)


def test_a_profile_takes_idle_gpus_only_and_never_preempts() -> None:
    # LAS preempts for a job with less attained service; a profile must not: it waits for
    # an idle GPU of its flavor. b and c profile their one flavor first (300 s), then run
    # 1000 s on the K80 and 2000 s on the V100; a's K80 profile waits for b to end.
    b = make_job("b", job_type=RESNET, steps=T.throughput(RESNET, K80) * 1000, flavors=("k80",))
    c = make_job("c", job_type=RESNET, steps=T.throughput(RESNET, V100) * 2000,
                 flavors=("v100",))
    a = make_job("a", job_type=RECO, steps=T.throughput(RECO, K80) * 100, submit_s=10.0)
    r = simulate(make_workload(b, c, a), CLUSTER, "las", _learned(bootstrap_s=300.0))
    by_id = {j.job_id: j for j in r.jobs}
    assert by_id["b"].preemptions == by_id["c"].preemptions == 0
    assert by_id["b"].jct_s == pytest.approx(1300.0)
    assert by_id["c"].jct_s == pytest.approx(2300.0)
    assert by_id["a"].first_start_s == pytest.approx(1300.0)  # its K80 profile, when idle


def test_a_gangs_profiles_give_its_shape_and_its_own_run_its_scale() -> None:
    two = make_cluster().node("v100", gpus=2).node("k80", gpus=2).build()
    truth = ObservedOracle(T, two)
    learned = LearnedOracle(truth)
    gang = make_job("g", job_type=RESNET, gpus=2)
    for f in (V100, K80):  # the 1-GPU profiles (what the bootstrap runs)
        pinned = replace(gang, num_gpus=1, flavors=(f,))
        truth.rate(pinned, f, True)
    one = {f: T.throughput(RESNET, f, 1) for f in (V100, K80)}
    before = {r.flavor: r.consolidated for r in learned.rates(gang)}
    # 1-GPU rate x gang size x the table's scaling prior (the other job types' 2-GPU gangs)
    eff = learned.scaling.efficiency(RESNET, K80, 2)
    assert eff < 1.0
    assert before[K80] == pytest.approx(2 * one[K80] * eff)
    truth.rate(gang, V100, True)  # the gang runs on the V100s
    after = {r.flavor: r.consolidated for r in learned.rates(gang)}
    gang_v100 = T.throughput(RESNET, V100, 2)
    assert after[V100] == pytest.approx(gang_v100)
    assert after[K80] == pytest.approx(one[K80] * gang_v100 / one[V100])


@pytest.mark.parametrize("compat", [None, "gavel"])
def test_a_profile_runs_under_its_own_id_and_teaches_its_job(compat: str | None) -> None:
    # a policy's memory is keyed by job id (Gavel's accounts, finish-time fairness's
    # cumulative isolated time): a profile must not be mistaken for its job there
    cfg = (SimConfig(compat="gavel", speeds="learned", bootstrap_s=300.0) if compat
           else _learned(bootstrap_s=300.0))
    sim = Simulator(make_workload(JOB), CLUSTER, make_policy("finish_time_fairness"), cfg, T)
    seen: list[set[str]] = []
    record = sim.world.on_decide
    assert record is not None

    def spy(snap: Snapshot) -> None:
        seen.append({v.spec.job_id for v in snap.jobs})
        record(snap)

    sim.world.on_decide = spy
    r = sim.run()
    assert {"a/profile"} in seen and {"a"} in seen and {"a", "a/profile"} not in seen
    assert sim.learned is not None and not sim.learned.profiling
    assert set(sim.learned.observed(JOB)) == {"V100-16GB", "K80"}
    assert [j.job_id for j in r.jobs] == ["a"] and r.summary.succeeded == 1
