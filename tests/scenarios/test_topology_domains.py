"""Scenario (issue 33, part 5): small jobs and NVLink-domain gangs on 12 NVLink domains.

The reported case: one small job spread over 9 of 12 NVLink domains left 256 GPUs idle while
29 gangs that each need a whole domain waited. Here 9 one-GPU jobs (20 h each) arrive every
10 minutes while 29 gangs of 32 GPUs (one domain each, about an hour each) queue behind them,
on 12 domains of 4 × 8 V100 whose hosts are listed in an order unrelated to their domains (as
host lists usually are). With Tessera the small jobs share one domain, every gang runs inside
one NVLink domain, and all of them finish. Without domain-aware placement (today's main) the
gangs are spread over consecutive hosts, across domains, and the small jobs over two domains.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.model.resources import HostDemand
from tessera.perf.profiles import default_throughputs
from tessera.sched.core import decide as decide_mod
from tessera.sched.core.cpu_stage import CpuRound
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Placement
from tessera.sim import world
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import RESNET, make_job, make_workload

V100 = resolve_flavor("v100")
RATE = default_throughputs().throughput(RESNET, V100)


def nvl_cluster(seed: int = 7) -> ClusterSpec:
    """12 NVLink domains of 4 × 8-GPU nodes, hosts listed in a shuffled order."""
    doms = [d for d in range(12) for _ in range(4)]
    random.Random(seed).shuffle(doms)
    return ClusterSpec("nvl-12x32", tuple(
        replace(n, nvlink_domain=f"nvl{doms[i]}") for i, n in enumerate(make_nodes(V100, 48, 8))))


def reported_case_jobs() -> list[object]:
    jobs = [make_job(f"small{i}", gpus=1, steps=RATE * 20 * 3600, submit_s=i * 600.0)
            for i in range(9)]
    jobs += [make_job(f"gang{i:02d}", gpus=32, steps=RATE * 3600 * 32, submit_s=300.0 + i * 60)
             for i in range(29)]
    return sorted(jobs, key=lambda j: j.submit_time_s)  # type: ignore[attr-defined]


def test_gangs_run_inside_one_domain_and_small_jobs_stay_packed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = nvl_cluster()
    domain = {n.node_id: n.nvlink_domain for n in cluster.nodes}
    starts: dict[str, list[Placement]] = {}
    original = world.SimWorld.start

    def recording_start(self: world.SimWorld, job: world.SimJob, p: Placement,
                        t_s: float) -> None:
        starts.setdefault(str(job.spec.job_id), []).append(p)
        original(self, job, p, t_s)

    monkeypatch.setattr(world.SimWorld, "start", recording_start)
    cfg = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events",
                                                locality_wait_s=1800.0))
    r = simulate(make_workload(*reported_case_jobs()), cluster, "fifo", cfg)  # type: ignore[arg-type]

    assert r.summary.unfinished == 0 and r.summary.succeeded == 38
    gang_domains = {j: [{domain[n] for n, _g in p.gpus_by_node} for p in ps]
                    for j, ps in starts.items() if j.startswith("gang")}
    assert len(gang_domains) == 29
    assert all(len(d) == 1 for ds in gang_domains.values() for d in ds), gang_domains
    small = {domain[n] for j, ps in starts.items() if j.startswith("small")
             for p in ps for n, _g in p.gpus_by_node}
    assert len(small) == 1


# -- The case as reported: one CPU-only job, 29 gangs of a whole domain ----------------------

#: The CPU-only job: 16 CPUs and 64 GiB for 20 h, at 1 step per second wherever it runs.
CPU_JOB_H = 20.0


def cpu_case_jobs() -> list[object]:
    """The CPU-only job at t = 0, then 29 one-hour gangs of 32 GPUs (a whole domain each)."""
    jobs: list[object] = [make_job(
        "cpu-etl", gpus=0, steps=CPU_JOB_H * 3600, submit_s=0.0,
        host=HostDemand(16.0, 64.0, per_gpu=False), cpu_steps_per_s=1.0)]
    jobs += [make_job(f"gang{i:02d}", gpus=32, steps=RATE * 3600 * 32, submit_s=300.0 + i * 60)
             for i in range(29)]
    return jobs


def _run_cpu_case(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, list[Placement]], object]:
    starts: dict[str, list[Placement]] = {}
    original = world.SimWorld.start

    def recording_start(self: world.SimWorld, job: world.SimJob, p: Placement,
                        t_s: float) -> None:
        starts.setdefault(str(job.spec.job_id), []).append(p)
        original(self, job, p, t_s)

    monkeypatch.setattr(world.SimWorld, "start", recording_start)
    cfg = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events",
                                                locality_wait_s=1800.0))
    r = simulate(make_workload(*cpu_case_jobs()), nvl_cluster(), "fifo", cfg)  # type: ignore[arg-type]
    return starts, r


def _spread_like_reported(snapshot, cpu_jobs, placements, started, pending):  # type: ignore[no-untyped-def]
    """The landing as reported: the CPU job's 16 CPUs spread over 9 nodes in 9 different
    NVLink domains (first node of each domain in host-list order), as a scheduler blind to
    domains spreading CPU work does."""
    out, new = dict(placements), []
    for j in cpu_jobs:
        if j.running:
            out[j.spec.job_id] = j.placement
            continue
        firsts: dict[str, str] = {}
        for n in snapshot.cluster.nodes:
            firsts.setdefault(n.nvlink_domain, n.node_id)
        nodes = list(firsts.values())[:9]
        held = tuple((n, 16.0 / 9, 64.0 / 9) for n in nodes)
        out[j.spec.job_id] = Placement((V100,), tuple((n, 0) for n in nodes), host_by_node=held)
        new.append(j.spec.job_id)
    return CpuRound(out, started + tuple(new), pending)


def test_a_cpu_only_job_stays_out_of_the_domains_the_gangs_need(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One CPU-only job (16 CPUs) and 29 whole-domain gangs on 12 NVLink domains: the CPU job
    lands on one node, every gang runs inside one domain, all finish, and the CPU job takes
    its 20 h at its own rate (no GPU flavor in it)."""
    cluster = nvl_cluster()
    domain = {n.node_id: n.nvlink_domain for n in cluster.nodes}
    starts, r = _run_cpu_case(monkeypatch)

    assert r.summary.unfinished == 0 and r.summary.succeeded == 30  # type: ignore[attr-defined]
    (cpu_p,) = starts["cpu-etl"]
    assert cpu_p.num_gpus == 0 and len(cpu_p.host_by_node) == 1
    assert cpu_p.host_by_node[0][1:] == (16.0, 64.0)
    gang_domains = [{domain[n] for n, _g in p.gpus_by_node}
                    for j, ps in starts.items() if j.startswith("gang") for p in ps]
    assert len(gang_domains) == 29
    assert all(len(d) == 1 for d in gang_domains), gang_domains
    cpu_job = next(j for j in r.jobs if j.job_id == "cpu-etl")  # type: ignore[attr-defined]
    assert cpu_job.finish_s == pytest.approx(CPU_JOB_H * 3600)


def test_the_reported_landing_breaks_nine_domains(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same jobs with the CPU job landed as reported (spread over 9 of 12 domains): the
    9 domains it touches cannot feed a whole-domain gang (each gang holds its servers'
    proportional CPUs, all of them), so gangs wait their locality wait and then run across
    domains. This is what the test above rules out."""
    cluster = nvl_cluster()
    domain = {n.node_id: n.nvlink_domain for n in cluster.nodes}
    monkeypatch.setattr(decide_mod, "place_cpu_jobs", _spread_like_reported)
    starts, _r = _run_cpu_case(monkeypatch)

    (cpu_p,) = starts["cpu-etl"]
    assert len({domain[n] for n, _c, _m in cpu_p.host_by_node}) == 9
    gang_domains = [{domain[n] for n, _g in p.gpus_by_node}
                    for j, ps in starts.items() if j.startswith("gang") for p in ps]
    assert any(len(d) > 1 for d in gang_domains)
