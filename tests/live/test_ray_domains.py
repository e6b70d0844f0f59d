"""A two-node Ray cluster whose nodes carry NVLink domains: a gang is kept inside one domain
(issue 33, part 6).

Each node offers 2 GPUs and one domain as Ray custom resources, as ``python -m
tessera.live.nvtopo`` prints them for ``ray start --resources``: the head ``nvlink_domain:nvA``,
the second node ``nvlink_domain:nvB``. The service's cluster lists four 1-GPU servers whose
domains alternate (nvA, nvB, nvA, nvB), as host lists do. A 1-GPU job takes a server of nvA;
a 2-GPU gang then goes to the two servers of nvB (the smallest domain that holds it), and its
Ray bundles, which ask for ``nvlink_domain:nvB``, both land on the second node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tessera.live.executors.base import free_port
from tests.live.helpers import ADMIN, serving, wait_for, write_config
from tests.live.ray_nodes import RayNodes

pytestmark = pytest.mark.ray
pytest.importorskip("ray")

SRC = Path(__file__).resolve().parents[2] / "src"
CLUSTER = """name: two-domains
nodes:
  - {flavor: V100, count: 1, gpus: 1, nvlink_domain: nvA}
  - {flavor: V100, count: 1, gpus: 1, nvlink_domain: nvB}
  - {flavor: V100, count: 1, gpus: 1, nvlink_domain: nvA}
  - {flavor: V100, count: 1, gpus: 1, nvlink_domain: nvB}
"""


@pytest.fixture
def nodes() -> Iterator[RayNodes]:
    n = RayNodes()
    try:
        n.add_head(2, {"gpu_flavor:V100-16GB": 2.0, "nvlink_domain:nvA": 2.0})
        n.add_node(2, {"gpu_flavor:V100-16GB": 2.0, "nvlink_domain:nvB": 2.0})
        yield n
    finally:
        n.stop()


def test_gang_is_kept_inside_one_nvlink_domain(nodes: RayNodes, tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_config(state)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("RAY_AUTH_MODE", None)
    with open(state / "serve.out", "ab") as out:  # (the service keeps its own copy)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tessera.cli", "serve", "--state", str(state), "--port",
             str(port), "--cluster", str(cluster), "--executor", "ray", "--ray-address",
             nodes.address, "--ray-token-file", str(nodes.token_file), "--ray-flavor-resource",
             "gpu_flavor", "--grace-s", "2"],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    auth = {"Authorization": f"Bearer {ADMIN}"}
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    try:
        wait_for(lambda: serving(url), 120, "the service to start")

        def submit(name: str, gpus: int) -> str:
            r = httpx.post(url + "/api/jobs", headers=auth, timeout=30, json={
                "name": name, "gpus": gpus, "queue": "team-a", "command": sleeper})
            assert r.status_code == 201, r.text
            return str(r.json()["job_id"])

        def job(jid: str) -> dict[str, object]:
            return dict(httpx.get(f"{url}/api/jobs/{jid}", headers=auth, timeout=10).json())

        small = submit("small", 1)
        wait_for(lambda: job(small)["state"] == "running", 120, "the small job to run")
        gang = submit("gang", 2)
        wait_for(lambda: job(gang)["state"] == "running", 120, "the gang to run")
        assert "v100-16gb-0000" in str(job(small)["placement"]), job(small)
        placement = str(job(gang)["placement"])
        assert "v100-16gb-0001" in placement and "v100-16gb-0003" in placement, placement

        groups = json.loads(nodes.query(
            "from ray.util import placement_group_table\n"
            "res = {n['NodeID']: n['Resources'] for n in ray.nodes() if n['Alive']}\n"
            "print(json.dumps([{'name': p['name'], 'domains': sorted({k for nid in "
            "p['bundles_to_node_id'].values() for k in res[nid] if k.startswith("
            "'nvlink_domain:')}), 'bundles': list(p['bundles'].values())} "
            "for p in placement_group_table().values() if p['state'] == 'CREATED']))"))
        by_domains = {tuple(g["domains"]): g for g in groups}
        assert set(by_domains) == {("nvlink_domain:nvA",), ("nvlink_domain:nvB",)}, groups
        gang_group = by_domains[("nvlink_domain:nvB",)]
        assert len(gang_group["bundles"]) == 2
        assert all(b.get("nvlink_domain:nvB") == 1.0 for b in gang_group["bundles"]), groups
    finally:
        proc.terminate()
        proc.wait(timeout=60)
