"""The NVLink-domain scenario (issue 33, part 5) against the live service, marked slow.

The simulator's scenario (``test_topology_domains.py``) at a size one machine's processes can
run: 12 NVLink domains of 2 servers × 2 GPUs (48 GPUs, hosts listed in a shuffled order), 9
one-GPU ``sleep`` jobs that hold their GPUs throughout, then 29 gangs of 4 GPUs (one domain
each) behind them, FIFO with a 10-minute locality wait, local executor. Every gang runs inside
one NVLink domain and all 29 finish; the small jobs fill the fewest domains they can (3 of 12:
4 GPUs a domain). The same with one CPU-only job in place of the small ones (the case as
reported): it stays on one server and every gang still runs inside one domain.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.executors.local import LocalExecutor
from tessera.live.layout import default_work_dir
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.store import Store
from tessera.live.tenancy import load_tenancy
from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.settings import SchedulerSettings
from tests.live.helpers import ADMIN, auth, wait_for, write_config

pytestmark = pytest.mark.slow


def _cluster() -> ClusterSpec:
    doms = [d for d in range(12) for _ in range(2)]
    random.Random(7).shuffle(doms)
    nodes = make_nodes(resolve_flavor("v100"), 24, 2)
    return ClusterSpec("nvl-12x4", tuple(replace(n, nvlink_domain=f"nvl{doms[i]}")
                                         for i, n in enumerate(nodes)))


def test_gangs_run_inside_one_domain_live(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_config(state, [{"name": "team-a", "nominal_gpus": 48},
                         {"name": "team-b", "nominal_gpus": 0}])
    work = default_work_dir(state)
    cluster = _cluster()
    svc = LiveService(
        Store(state / "state.db"), LocalExecutor(work / "runs", grace_s=1.0), cluster,
        load_tenancy(state), "fifo", work,
        ServiceOptions(scheduler=SchedulerSettings(locality_wait_s=600.0), period_s=0.5,
                       poll_s=0.05, grace_s=1.0))
    svc.start()
    domain = {n.node_id: n.nvlink_domain for n in cluster.nodes}
    try:
        with TestClient(create_app(svc)) as api:
            def submit(name: str, gpus: int, command: str) -> str:
                r = api.post("/api/jobs", headers=auth(ADMIN), json={
                    "name": name, "gpus": gpus, "queue": "team-a", "command": command})
                assert r.status_code == 201, r.text
                return str(r.json()["job_id"])

            def state_of(jid: str) -> str:
                return str(api.get(f"/api/jobs/{jid}", headers=auth(ADMIN)).json()["state"])

            small = [submit(f"small{i}", 1, "sleep 600") for i in range(9)]
            wait_for(lambda: all(state_of(j) == "running" for j in small), 60,
                     "the small jobs to run")
            gangs = [submit(f"gang{i:02d}", 4, "sleep 1") for i in range(29)]
            wait_for(lambda: all(state_of(j) == "succeeded" for j in gangs), 240,
                     "all 29 gangs to finish")
            runs = {a.job_id: a.placement for a in svc.store.allocations(("done", "running"))}
            for jid in gangs:
                doms = {domain[n] for n, _g in runs[jid].gpus_by_node}
                assert len(doms) == 1, (jid, runs[jid].describe())
            small_doms = {domain[n] for j in small for n, _g in runs[j].gpus_by_node}
            assert len(small_doms) == 3, small_doms
            for j in small:
                api.post(f"/api/jobs/{j}/cancel", headers=auth(ADMIN))
    finally:
        svc.stop()


def test_a_cpu_only_job_leaves_the_gangs_their_domains_live(tmp_path: Path) -> None:
    """The reported case, live: one CPU-only job (``gpus: 0``, 4 of a server's 16 CPUs) that
    runs throughout, then 29 gangs of a whole domain (4 GPUs) each. The CPU job runs on one
    server with no GPUs; every gang runs inside one NVLink domain, and all 29 finish."""
    state = tmp_path / "state"
    write_config(state, [{"name": "team-a", "nominal_gpus": 48},
                         {"name": "team-b", "nominal_gpus": 0}])
    work = default_work_dir(state)
    cluster = _cluster()
    svc = LiveService(
        Store(state / "state.db"), LocalExecutor(work / "runs", grace_s=1.0), cluster,
        load_tenancy(state), "fifo", work,
        ServiceOptions(scheduler=SchedulerSettings(locality_wait_s=600.0), period_s=0.5,
                       poll_s=0.05, grace_s=1.0))
    svc.start()
    domain = {n.node_id: n.nvlink_domain for n in cluster.nodes}
    try:
        with TestClient(create_app(svc)) as api:
            def submit(body: dict[str, object]) -> str:
                r = api.post("/api/jobs", headers=auth(ADMIN), json={"queue": "team-a", **body})
                assert r.status_code == 201, r.text
                return str(r.json()["job_id"])

            def state_of(jid: str) -> str:
                return str(api.get(f"/api/jobs/{jid}", headers=auth(ADMIN)).json()["state"])

            cpu = submit({"name": "etl", "gpus": 0, "host": {"cpus": 4, "memory": "1Gi"},
                          "command": "sleep 600"})
            wait_for(lambda: state_of(cpu) == "running", 60, "the CPU-only job to run")
            gangs = [submit({"name": f"gang{i:02d}", "gpus": 4, "command": "sleep 1"})
                     for i in range(29)]
            wait_for(lambda: all(state_of(j) == "succeeded" for j in gangs), 240,
                     "all 29 gangs to finish")
            runs = {a.job_id: a.placement for a in svc.store.allocations(("done", "running"))}
            assert runs[cpu].num_gpus == 0 and len(runs[cpu].host_by_node) == 1
            for jid in gangs:
                doms = {domain[n] for n, _g in runs[jid].gpus_by_node}
                assert len(doms) == 1, (jid, runs[jid].describe())
            api.post(f"/api/jobs/{cpu}/cancel", headers=auth(ADMIN))
    finally:
        svc.stop()
