"""Real ``ray start`` nodes on this machine for tests: a head with token auth, more nodes.

Each cluster gets its own temp dir, ports and ``HOME`` (holding its own
``~/.ray/auth_token``, so Ray 2.60's default token auth is on, as on a stock cluster), and
:meth:`RayNodes.stop` ends exactly its processes (by that temp dir), never another Ray.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

from tessera.live.executors.base import free_port
from tessera.live.executors.ray_cluster import cluster_pids, head_port_flags, stop_pids

RAY_CLI = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


class RayNodes:
    """A head (``add_head``) and worker nodes (``add_node``) sharing one temp dir."""

    def __init__(self) -> None:
        self.temp_dir = Path(tempfile.mkdtemp(prefix="tsr-", dir="/tmp"))
        self.home = self.temp_dir / "home"
        (self.home / ".ray").mkdir(parents=True)
        self.token_file = self.home / ".ray" / "auth_token"
        self.token_file.write_text(secrets.token_hex(32))
        self.address = ""

    def _start(self, args: list[str], auth_mode: str | None = None) -> None:
        env = {**os.environ, "HOME": str(self.home)}
        env.pop("RAY_AUTH_MODE", None)
        if auth_mode is not None:
            env["RAY_AUTH_MODE"] = auth_mode
        r = subprocess.run([*RAY_CLI, "start", *args, "--num-cpus", "2",
                            "--disable-usage-stats"], env=env, capture_output=True, text=True,
                           timeout=180)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    def add_head(self, gpus: int, resources: dict[str, float]) -> str:
        port = free_port()
        self._start(["--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                     "--num-gpus", str(gpus), "--resources", json.dumps(resources),
                     "--temp-dir", str(self.temp_dir), "--include-dashboard", "false",
                     *head_port_flags()])
        self.address = f"127.0.0.1:{port}"
        return self.address

    def add_node(self, gpus: int, resources: dict[str, float]) -> None:
        self._start(["--address", self.address, "--node-ip-address", "127.0.0.1",
                     "--num-gpus", str(gpus), "--resources", json.dumps(resources),
                     *head_port_flags(head=False)], auth_mode="token")
        # (``ray start --address`` never turns token auth on by itself, as Ray's docs say)

    def query(self, code: str) -> str:
        """Run ``code`` in a fresh driver connected to the cluster; returns its stdout."""
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH":
               str(self.token_file)}
        prog = ("import ray, json\n"
                f"ray.init(address={self.address!r}, namespace='tessera', log_to_driver=False, "
                "logging_level='ERROR')\n" + code)
        r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    def stop(self) -> None:
        stop_pids(cluster_pids(str(self.temp_dir)), 5.0)
