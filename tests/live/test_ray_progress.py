"""Progress reports from a Ray rank on a second node (issue 35 part 4).

A two-node Ray cluster on this machine (the head with 2 "V100"s, a second node with 2 "T4"s,
token auth on); ``tessera serve --executor ray --progress-url`` names the API as the ranks reach
it. A job allowed only on T4s runs on the second node, reports with ``tessera.progress``, and
the service's events show the rate it measured there.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tessera.live.executors.base import free_port
from tests.live.helpers import ADMIN, wait_for, write_config
from tests.live.ray_nodes import RayNodes
from tests.live.test_ray_multinode import _serve, _up

pytestmark = pytest.mark.ray
pytest.importorskip("ray")

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPT = """
import os, time
import tessera
t0 = time.monotonic()
while True:
    tessera.progress(steps=20.0 * (time.monotonic() - t0))
    time.sleep(0.1)
"""


@pytest.fixture
def nodes() -> Iterator[RayNodes]:
    n = RayNodes()
    try:
        n.add_head(2, {"accelerator_type:V100": 1.0})
        n.add_node(2, {"accelerator_type:T4": 1.0})
        yield n
    finally:
        n.stop()


def test_a_rank_on_the_second_node_reports_its_speed(nodes: RayNodes, tmp_path: Path) -> None:
    state = tmp_path / "state"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    write_config(state)
    proc = _serve(state, port, nodes, "--ray-token-file", str(nodes.token_file),
                  "--progress-url", url)
    try:
        wait_for(lambda: _up(url), 120, "the service to start")
        script = tmp_path / "job.py"
        script.write_text(SCRIPT)
        head = {"Authorization": f"Bearer {ADMIN}"}
        r = httpx.post(url + "/api/jobs", headers=head, timeout=30, json={
            "name": "remote", "gpus": 1, "queue": "team-a", "flavors": ["t4"],
            "total_steps": 1000000, "command": [sys.executable, str(script)],
            "env": {"PYTHONPATH": str(SRC)}})
        assert r.status_code == 201, r.text
        jid = r.json()["job_id"]

        def measured() -> list[str]:
            job = httpx.get(f"{url}/api/jobs/{jid}", headers=head, timeout=10).json()
            return [e["detail"] for e in job["events"] if e["detail"].startswith("measured ")]

        wait_for(lambda: bool(measured()), 180, "a measured rate from the T4 node")
        (line,) = measured()
        assert line.endswith("on T4 (prior 1)") and 17.0 < float(line.split()[1]) < 23.0, line
        job = httpx.get(f"{url}/api/jobs/{jid}", headers=head, timeout=10).json()
        assert job["placement"].startswith("1×T4"), job["placement"]
        httpx.post(f"{url}/api/jobs/{jid}/cancel", headers=head, timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
