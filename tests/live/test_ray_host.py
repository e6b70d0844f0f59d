"""Ray bundles carry a run's CPUs and memory (issue 33 part 6).

The bundle shapes are checked without Ray running; one opt-in test (``-m ray``) runs a job that
asks for host resources on an embedded Ray cluster and reads its placement group back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tessera.live.executors.base import LaunchSpec
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal, load_tenancy
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import wait_for, wait_for_job, write_config

ray = pytest.importorskip("ray")

from tessera.live.executors.ray.cluster import node_hosts, unplaceable_reason  # noqa: E402
from tessera.live.executors.ray.head import EmbeddedHead  # noqa: E402
from tessera.live.executors.ray.launch import run_bundles  # noqa: E402

ADMIN = Principal("admin", None)
V100 = resolve_flavor("V100")


def _spec(host: tuple[tuple[str, float, float], ...]) -> LaunchSpec:
    return LaunchSpec("j", 1, ("true",), (), Placement.of(V100, (("a", 2), ("b", 1))), "/c",
                      host_by_node=host)


def test_bundles_carry_cpus_and_memory_per_node() -> None:
    b = run_bundles(_spec((("a", 12.0, 64.0), ("b", 6.0, 32.0))), "accelerator_type")
    assert [(x["GPU"], x["CPU"], x["memory"]) for x in b] == [
        (2.0, 12.0, 64.0 * 2**30), (1.0, 6.0, 32.0 * 2**30)]
    assert all("CPU" not in x and "memory" not in x for x in run_bundles(_spec(()),
                                                                          "accelerator_type"))


def test_a_bundle_no_node_can_feed_says_so() -> None:
    b = run_bundles(_spec((("a", 48.0, 8.0), ("b", 1.0, 1.0))), "accelerator_type")
    nodes = [{"GPU": 8.0, "accelerator_type:V100": 1.0, "CPU": 32.0, "memory": 2**38}]
    why = unplaceable_reason(b, nodes)
    assert why is not None and why.startswith("no Ray node with its 2 GPUs has 48 CPUs"), why


def test_ray_nodes_report_their_cpus_and_memory() -> None:
    got = node_hosts([{"Alive": True, "NodeManagerAddress": "10.0.0.1",
                       "Resources": {"CPU": 96.0, "memory": 512 * 2**30}},
                      {"Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {}}])
    assert got == {"10.0.0.1": (96.0, 512.0)}


@pytest.fixture
def ray_service(tmp_path: Path) -> Iterator[LiveService]:
    from tessera.live.executors.ray.executor import RayExecutor

    state, work = tmp_path / "state", tmp_path / "state-work"
    write_config(state)
    cluster = load_cluster("v100:2", 2)
    svc = LiveService(Store(state / "state.db"),
                      RayExecutor(cluster, None, work / "runs", grace_s=1.0, state_dir=state),
                      cluster, load_tenancy(state), "fifo", work,
                      ServiceOptions(period_s=0.5, poll_s=0.1, grace_s=1.0))
    svc.start()
    yield svc
    svc.stop()
    EmbeddedHead(state).stop()


@pytest.mark.ray
def test_a_runs_placement_group_reserves_its_cpus_and_memory(ray_service: LiveService) -> None:
    svc = ray_service
    jid = svc.submit(parse_request("name: fed\nqueue: team-a\ncommand: sleep 30\n"
                                   "host: {cpus: 1, memory: 256Mi}\n"), ADMIN).job.spec.job_id
    wait_for(lambda: svc.store.get(jid).state.value == "running", 60,  # type: ignore[union-attr]
             "the job to run")
    groups = [g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"]
    bundles = [b for g in groups for b in g["bundles"].values()]
    assert any(b.get("CPU") == 1.0 and b.get("memory") == 256 * 2**20 for b in bundles), bundles
    notes = [e.detail for e in svc.store.events(jid) if e.kind == "host"]
    assert notes and "Ray placement-group bundles (1 CPUs + 0.25 GiB)" in notes[0], notes
    svc.cancel(jid, ADMIN)


@pytest.mark.ray
@pytest.mark.slow
def test_a_cpu_only_job_runs_on_the_embedded_head_unheld(ray_service: LiveService) -> None:
    """The embedded head is one Ray node offering no node marks: the CPU-only bundle asks its
    CPUs only, runs there, and the events say it was not held to one node."""
    svc = ray_service
    show = "import os; print('gpus', repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"
    jid = svc.submit(parse_request(json.dumps({
        "name": "etl", "queue": "team-a", "gpus": 0, "host": {"cpus": 1},
        "command": [sys.executable, "-S", "-c", show]}), "json"),
        Principal("admin", None)).job.spec.job_id
    wait_for_job(svc, jid, timeout_s=120)
    notes = [e.detail for e in svc.store.events(jid) if e.kind == "host"]
    assert len(notes) == 1 and "not held to one Ray node" in notes[0], notes
    chunk = svc.executor.read_log(jid, 1, 0, 0, 10_000)
    assert chunk is not None and "gpus ''" in chunk.text, chunk
