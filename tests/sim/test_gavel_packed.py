"""Gavel's packed policies and its remaining policies under ``--compat gavel``.

Two kinds of evidence:

* a case derived by hand from Gavel's packed mechanism (``scheduler.py`` @ c4fa400:
  ``_schedule_jobs_on_workers_helper`` over job pairs, ``_get_job_steps_and_finish_times``);
* the average JCT Gavel's own simulator printed for a small trace, run at c4fa400 with
  ``--throughputs_file simulation_throughputs.json -c 2:1:1 --num_gpus_per_server 1:1:1
  --time_per_iteration 360 --seed 0 --solver ECOS`` on the TSV this test writes (14 one-GPU jobs
  drawn by ``generate_gavel_like(14, jobs_per_hour=20, seed=3, multi_gpu=False)``). Our twins
  must print the same number; the LP policies need the ``gavel-compat`` extra (ECOS).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.gavel.solver import ecos_available
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import generate_gavel_like, load_trace, write_gavel_tsv
from tests.builders import make_cluster, make_job, make_workload

T = default_throughputs()
R18_16 = "ResNet-18 (batch size 16)"
R18_64 = "ResNet-18 (batch size 64)"
GAVEL = SimConfig(compat="gavel", compat_solver="highs")

#: Gavel's printed average JCT (s) on the 14-job trace (see the module docstring).
GAVEL_TINY = {
    "fifo_packed": 103071.75401174111,
    "gandiva": 81095.2080714116,
    "allox": 77238.78856460415,
    "max_min_fairness_packed": 64584.745165238375,
    "min_total_duration": 177335.37548709824,
    "min_total_duration-agnostic": 132135.57634789392,
}
LP_POLICIES = {"max_min_fairness_packed", "min_total_duration", "min_total_duration-agnostic"}


def test_fifo_packed_runs_a_pair_at_its_measured_speeds_by_hand() -> None:
    # One V100, two jobs at t=0. Gavel's FIFO gives job 0 the V100; job 1 is left queued and
    # _pack pairs it with job 0: normalised throughput 32.35/32.35 + 24.09/24.09 = 2 > 1.5
    # (Gavel measured this pair at both jobs' isolated speeds). The pair is the only entry
    # with a priority, so it runs; each job runs its remaining steps at its pair speed and the
    # lease ends at the later finish, which Gavel stamps on both jobs.
    a, b = T.colocated(R18_16, R18_64, resolve_flavor("v100"))
    v100 = resolve_flavor("v100")
    assert (a, b) == (T.throughput(R18_16, v100), T.throughput(R18_64, v100))
    wl = make_workload(make_job("0", steps=5000, job_type=R18_16),
                       make_job("1", steps=3000, job_type=R18_64))
    cluster = make_cluster().node("v100", gpus=1).build()
    end = max(5000 / a, 3000 / b)
    packed = simulate(wl, cluster, "fifo_packed", GAVEL)
    assert {j.job_id: j.jct_s for j in packed.jobs} == pytest.approx({"0": end, "1": end})
    # Unpacked (fifo_perf): job 1 waits for job 0's round, then runs alone.
    alone = simulate(wl, cluster, "fifo", GAVEL)
    assert {j.job_id: j.jct_s for j in alone.jobs} == pytest.approx(
        {"0": 5000 / a, "1": 5000 / a + 3000 / b})


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gavel") / "tiny.tsv"
    write_gavel_tsv(generate_gavel_like(14, jobs_per_hour=20, seed=3, multi_gpu=False), path)
    return path


@pytest.mark.parametrize("policy", sorted(set(GAVEL_TINY) - {"min_total_duration-agnostic"}))
def test_twin_prints_gavels_average_jct(policy: str, tiny_trace: Path) -> None:
    if policy in LP_POLICIES and not ecos_available():
        pytest.skip("needs cvxpy + ECOS (the gavel-compat extra)")
    cluster = load_cluster("v100:2,p100:1,k80:1", gpus_per_server=1)
    r = simulate(load_trace(tiny_trace, format="gavel"), cluster, policy,
                 SimConfig(compat="gavel", compat_solver="ecos" if policy in LP_POLICIES
                           else "highs"))
    assert r.summary.succeeded == 14
    assert r.summary.avg_jct_s == pytest.approx(GAVEL_TINY[policy], rel=1e-9)


@pytest.mark.slow
def test_agnostic_min_total_duration_prints_gavels_average_jct(tiny_trace: Path) -> None:
    if not ecos_available():
        pytest.skip("needs cvxpy + ECOS (the gavel-compat extra)")
    cluster = load_cluster("v100:2,p100:1,k80:1", gpus_per_server=1)
    r = simulate(load_trace(tiny_trace, format="gavel"), cluster,
                 "min_total_duration-agnostic", SimConfig(compat="gavel", compat_solver="ecos"))
    assert r.summary.avg_jct_s == pytest.approx(GAVEL_TINY["min_total_duration-agnostic"],
                                                rel=1e-9)


@pytest.mark.parametrize("policy", ["allox", "min_total_duration",
                                    "min_total_duration-agnostic"])
def test_gavel_only_policies_that_do_not_pack_are_refused_outside_compat(policy: str) -> None:
    wl = make_workload(make_job("0", steps=100))
    cluster = make_cluster().node("v100", gpus=1).build()
    with pytest.raises(SpecError, match="compat gavel"):
        simulate(wl, cluster, policy, SimConfig())


def test_allox_gives_multi_gpu_jobs_a_zero_share_and_says_so() -> None:
    wl = make_workload(make_job("0", steps=100, gpus=2), make_job("1", steps=100))
    cluster = make_cluster().node("v100", gpus=2).build()
    r = simulate(wl, cluster, "allox", GAVEL)
    assert r.summary.succeeded == 2  # the 2-GPU job runs on what the 1-GPU job leaves
    assert any("one-GPU jobs only" in n and "zero share" in n for n in r.notes)


def test_hetero_pack_runs_under_compat_and_packs() -> None:
    wl = make_workload(*(make_job(str(i), steps=20000, job_type=R18_16 if i % 2 else R18_64)
                         for i in range(4)))
    cluster = make_cluster().node("v100", gpus=1, count=2).build()
    packed = simulate(wl, cluster, "hetero_pack", GAVEL)
    plain = simulate(wl, cluster, "hetero_gittins", GAVEL)
    assert packed.summary.succeeded == plain.summary.succeeded == 4
    assert packed.summary.avg_jct_s < plain.summary.avg_jct_s
