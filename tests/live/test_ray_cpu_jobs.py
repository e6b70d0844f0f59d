"""A CPU-only job on a two-node Ray cluster (issue 33, parts 5-6): it lands on the node the CPU
stage chose, outside the NVLink domain, survives a killed service, and runs to completion while
a whole-domain gang runs inside its domain beside it; a second one, cancelled, is stopped and its
placement group removed.

The head offers 2 GPUs and the domain ``nvlink_domain:nvA``; the second node offers 1 GPU, no
domain, and the node mark ``tessera_node:cpu-0000`` (``ray start --resources``), so the CPU-only
bundle -- ``{"CPU": 1, "memory": ..., "tessera_node:cpu-0000": 0.001}`` -- can only go there.
The service's cluster names the same two servers: ``dom-0000`` (2 GPUs, domain nvA) and
``cpu-0000`` (1 GPU, no domain). The CPU stage puts the CPU-only job on ``cpu-0000`` (a node in
no domain); the 2-GPU gang takes domain nvA whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tessera.live.executors.base import free_port
from tests.live.helpers import ADMIN, serving, wait_for, write_config
from tests.live.ray_nodes import RayNodes

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("ray")

SRC = Path(__file__).resolve().parents[2] / "src"
CLUSTER = """name: cpu-beside-domain
nodes:
  - {flavor: V100, count: 1, gpus: 2, cpu_cores: 2, mem_gib: 8, nvlink_domain: nvA, prefix: dom}
  - {flavor: V100, count: 1, gpus: 1, cpu_cores: 2, mem_gib: 8, prefix: cpu}
"""
AUTH = {"Authorization": f"Bearer {ADMIN}"}
UP_S = 150.0


@pytest.fixture
def nodes() -> Iterator[RayNodes]:
    n = RayNodes()
    try:
        n.add_head(2, {"gpu_flavor:V100-16GB": 2.0, "nvlink_domain:nvA": 2.0})
        n.add_node(1, {"gpu_flavor:V100-16GB": 1.0, "tessera_node:cpu-0000": 1.0})
        yield n
    finally:
        n.stop()


def _serve(nodes: RayNodes, state: Path, cluster: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("RAY_AUTH_MODE", None)
    with open(state / "serve.out", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tessera.cli", "serve", "--state", str(state), "--port",
             str(port), "--cluster", str(cluster), "--executor", "ray", "--ray-address",
             nodes.address, "--ray-token-file", str(nodes.token_file), "--ray-flavor-resource",
             "gpu_flavor", "--grace-s", "2"],
            env=env, stdout=out, stderr=subprocess.STDOUT)


def _groups(nodes: RayNodes) -> list[dict[str, Any]]:
    """Each placed group: its bundles and the tessera marks of the Ray nodes holding them."""
    got: list[dict[str, Any]] = json.loads(nodes.query(
        "from ray.util import placement_group_table\n"
        "res = {n['NodeID']: n['Resources'] for n in ray.nodes() if n['Alive']}\n"
        "print(json.dumps([{'name': p['name'], 'marks': sorted({k for nid in "
        "p['bundles_to_node_id'].values() for k in res[nid] if k.startswith("
        "('nvlink_domain:', 'tessera_node:'))}), 'bundles': list(p['bundles'].values())} "
        "for p in placement_group_table().values() if p['state'] == 'CREATED']))"))
    return got


def test_a_cpu_only_job_runs_on_its_node_beside_a_domain_gang(nodes: RayNodes,
                                                              tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_config(state)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    go = tmp_path / "go"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    etl = [sys.executable, "-S", "-c",
           "import os, time\n"
           f"while not os.path.exists({str(go)!r}): time.sleep(0.1)\n"
           "print('gpus', repr(os.environ.get('CUDA_VISIBLE_DEVICES')), 'flavor', "
           "repr(os.environ.get('TESSERA_FLAVOR')), 'world', os.environ.get('WORLD_SIZE'))\n"]
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    proc = _serve(nodes, state, cluster, port)
    try:
        wait_for(lambda: serving(url), UP_S, "the service to start")

        def submit(body: dict[str, Any]) -> str:
            r = httpx.post(url + "/api/jobs", headers=AUTH, timeout=30,
                           json={"queue": "team-a", **body})
            assert r.status_code == 201, r.text
            return str(r.json()["job_id"])

        def job(jid: str) -> dict[str, Any]:
            return dict(httpx.get(f"{url}/api/jobs/{jid}", headers=AUTH, timeout=10).json())

        cpu = submit({"name": "etl", "gpus": 0, "host": {"cpus": 1, "memory": "256Mi"},
                      "command": etl})
        wait_for(lambda: job(cpu)["state"] == "running", 120, "the CPU-only job to run")
        gang = submit({"name": "gang", "gpus": 2, "command": sleeper})
        wait_for(lambda: job(gang)["state"] == "running", 120, "the gang to run")
        assert "cpu-0000" in str(job(cpu)["placement"]), job(cpu)
        assert "dom-0000" in str(job(gang)["placement"]), job(gang)

        by_marks = {tuple(g["marks"]): g for g in _groups(nodes)}
        assert set(by_marks) == {("tessera_node:cpu-0000",), ("nvlink_domain:nvA",)}, by_marks
        (cpu_bundle,) = by_marks[("tessera_node:cpu-0000",)]["bundles"]
        assert "GPU" not in cpu_bundle and cpu_bundle["CPU"] == 1.0, cpu_bundle
        assert cpu_bundle["memory"] == 256 * 2**20 and \
            cpu_bundle["tessera_node:cpu-0000"] == pytest.approx(0.001), cpu_bundle
        (gang_bundle,) = by_marks[("nvlink_domain:nvA",)]["bundles"]
        assert gang_bundle["GPU"] == 2.0, gang_bundle
        notes = [e["detail"] for e in job(cpu)["events"] if e["kind"] == "host"]
        assert len(notes) == 1 and "CPU-only: no GPUs visible" in notes[0] and \
            "held to the Ray node that offers tessera_node:cpu-0000" in notes[0], notes

        # A killed service finds the CPU-only run again on restart (no second run).
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc = _serve(nodes, state, cluster, port)
        wait_for(lambda: serving(url), UP_S, "the service to start again")
        assert job(cpu)["state"] == "running", job(cpu)
        go.write_text("")
        wait_for(lambda: job(cpu)["state"] == "succeeded", 120, "the CPU-only job to end")
        done = job(cpu)
        assert done["runs"] == 1, done
        log = httpx.get(f"{url}/api/jobs/{cpu}/logs", headers=AUTH, timeout=10).json()
        assert "gpus '' flavor 'cpu' world 1" in log["text"], log
        assert job(gang)["state"] == "running", job(gang)

        # A cancelled CPU-only run is stopped and its group removed, as a GPU run's is.
        second = submit({"name": "etl2", "gpus": 0, "host": {"cpus": 1}, "command": sleeper})
        wait_for(lambda: job(second)["state"] == "running", 120, "the second CPU job to run")
        r = httpx.post(f"{url}/api/jobs/{second}/cancel", headers=AUTH, timeout=30)
        assert r.status_code == 200, r.text
        wait_for(lambda: job(second)["state"] == "cancelled", 60, "the CPU job to be cancelled")
        wait_for(lambda: ("tessera_node:cpu-0000",) not in
                 {tuple(g["marks"]) for g in _groups(nodes)}, 60, "its group to be removed")
        assert job(gang)["state"] == "running", job(gang)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
