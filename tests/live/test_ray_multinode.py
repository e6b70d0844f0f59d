"""A two-node Ray cluster on this machine, reached by ``tessera serve --ray-address``.

The head offers 2 "V100"s and a second node 2 "T4"s (``ray start --num-gpus 2 --resources
'{"accelerator_type:V100": 1}'``: what Ray's GPU detection publishes on a real node), with
Ray 2.60's default token auth on. A 4-rank mixed gang (2 V100 + 2 T4) must rendezvous
(gloo all-reduce across the nodes), get one GPU each through Ray (``CUDA_VISIBLE_DEVICES``,
distinct on each node), show its output through ``tessera logs``, and leave no actor, no
placement group and no process once cancelled.
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
from tests.live.helpers import ADMIN, wait_for, write_config
from tests.live.ray_nodes import RayNodes

pytestmark = pytest.mark.ray
pytest.importorskip("ray")
pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[2] / "src"
RANK_SCRIPT = """
import os, sys, time, torch, torch.distributed as dist
e = os.environ
print("rank", e["RANK"], "flavor", e["TESSERA_FLAVOR"], "master", e["MASTER_ADDR"],
      "cvd", e.get("CUDA_VISIBLE_DEVICES", "-"), flush=True)
dist.init_process_group("gloo", rank=int(e["RANK"]), world_size=int(e["WORLD_SIZE"]))
t = torch.ones(1)
dist.all_reduce(t)
print("allreduce", int(t.item()), flush=True)
time.sleep(600)
"""


def _serve(state: Path, port: int, nodes: RayNodes, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("RAY_AUTH_MODE", None)
    state.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "tessera.cli", "serve", "--state", str(state), "--port",
         str(port), "--cluster", "v100:2,t4:2", "--gpus-per-server", "2", "--executor", "ray",
         "--ray-address", nodes.address, "--grace-s", "2", *extra],
        env=env, stdout=open(state / "serve.out", "ab"), stderr=subprocess.STDOUT)


@pytest.fixture
def nodes() -> Iterator[RayNodes]:
    n = RayNodes()
    try:
        n.add_head(2, {"accelerator_type:V100": 1.0})
        n.add_node(2, {"accelerator_type:T4": 1.0})
        yield n
    finally:
        n.stop()


def _cli(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "TESSERA_SERVER": url, "TESSERA_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "tessera.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_mixed_gang_across_two_nodes(nodes: RayNodes, tmp_path: Path) -> None:
    state = tmp_path / "state"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # Without the head's token the service stops in one line and writes nothing.
    refused = _serve(tmp_path / "refused", port, nodes)
    assert refused.wait(timeout=120) == 2
    out = (tmp_path / "refused" / "serve.out").read_text().strip().splitlines()
    assert len(out) == 1, out[-5:]
    assert out[0].startswith(f"error: cannot connect to Ray at {nodes.address}: the head "
                             "refused this process's auth token"), out
    assert not (tmp_path / "refused" / "state.db").exists()
    write_config(state)
    proc = _serve(state, port, nodes, "--ray-token-file", str(nodes.token_file),
                  "--mixed-gangs")
    try:
        wait_for(lambda: _up(url), 120, "the service to start")
        token = ADMIN
        script = tmp_path / "rank.py"
        script.write_text(RANK_SCRIPT)
        r = httpx.post(url + "/api/jobs", headers={"Authorization": f"Bearer {token}"},
                       json={"name": "wide", "gpus": 4, "queue": "team-a",
                             "command": [sys.executable, str(script)]}, timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["job_id"]
        logs: dict[int, str] = {}

        def all_reduced() -> bool:
            for rank in range(4):
                res = _cli(url, token, "logs", jid, "--rank", str(rank))
                logs[rank] = res.stdout
            return all("allreduce 4" in text for text in logs.values())

        wait_for(all_reduced, 180, "all four ranks to all-reduce")
        seen = [dict(zip(*[iter(logs[r].split("\n")[0].split())] * 2, strict=True))
                for r in range(4)]
        by_flavor: dict[str, list[str]] = {}
        for s in seen:
            by_flavor.setdefault(s["flavor"], []).append(s["cvd"])
        assert sorted(by_flavor) == ["T4", "V100-16GB"]
        for cvds in by_flavor.values():  # one GPU each, distinct on each node
            assert all(c.isdigit() for c in cvds) and len(set(cvds)) == 2, seen
        assert len({s["master"] for s in seen}) == 1  # rank 0's node, seen by every rank
        assert _cli(url, token, "cancel", jid).returncode == 0
        wait_for(lambda: not httpx.get(url + "/api/jobs/" + jid, timeout=10, headers={
            "Authorization": f"Bearer {token}"}).json()["placement"], 60, "the GPUs back")
        def left() -> dict[str, list[object]]:
            return dict(json.loads(nodes.query(
                "from ray.util import placement_group_table\n"
                "from tessera.live.executors.ray.hosts import HostPool\n"
                "print(json.dumps({'ranks': HostPool().held(), 'pgs': [p['state'] for p in "
                "placement_group_table().values() if p['state'] != 'REMOVED']}))")))

        # The ranks' hosts stay (warm, holding no resources) but hold no rank of the job.
        wait_for(lambda: left() == {"ranks": [], "pgs": []}, 30, "the run to be released")
        wait_for(lambda: _rank_processes(str(script)) == [], 30, "the ranks to exit")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _rank_processes(script: str) -> list[int]:
    """Processes running ``script`` (the ranks' command line names it)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and script.encode() in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found
