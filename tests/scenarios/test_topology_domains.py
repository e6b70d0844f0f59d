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
from tessera.perf.profiles import default_throughputs
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
