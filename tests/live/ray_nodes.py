"""Real ``ray start`` nodes on this machine for tests: a head with token auth, more nodes.

Each cluster gets its own temp dir, ports and ``HOME`` (holding its own
``~/.ray/auth_token``, so Ray 2.60's default token auth is on, as on a stock cluster; with
``auth=False`` there is none and auth is off), and :meth:`RayNodes.stop` ends exactly its
processes (each ``ray start`` runs in a session of its own, marked as the embedded head's are),
never another Ray.
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
from tessera.live.executors.ray.head import (
    HEAD_MARK_VAR,
    cluster_pids,
    head_port_flags,
    stop_pids,
)

RAY_CLI = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


class RayNodes:
    """A head (``add_head``) and worker nodes (``add_node``) sharing one temp dir."""

    def __init__(self, auth: bool = True) -> None:
        self.temp_dir = Path(tempfile.mkdtemp(prefix="tsr-", dir="/tmp"))
        self.home = self.temp_dir / "home"
        (self.home / ".ray").mkdir(parents=True)
        self.token_file = self.home / ".ray" / "auth_token"
        self.auth = auth
        if auth:
            self.token_file.write_text(secrets.token_hex(32))
        self.address = ""
        self.sessions: list[int] = []

    def _start(self, args: list[str], auth_mode: str | None = None) -> None:
        env = {**os.environ, "HOME": str(self.home), HEAD_MARK_VAR: str(self.temp_dir)}
        env.pop("RAY_AUTH_MODE", None)
        env.pop("RAY_AUTH_TOKEN_PATH", None)
        if not self.auth:
            auth_mode = "disabled"
        if auth_mode is not None:
            env["RAY_AUTH_MODE"] = auth_mode
        proc = subprocess.Popen([*RAY_CLI, "start", *args, "--num-cpus", "2",
                                 "--disable-usage-stats"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.sessions.append(proc.pid)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, out[-2000:] + err[-2000:]

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
        env = {**os.environ, "RAY_AUTH_MODE": "token" if self.auth else "disabled",
               "RAY_AUTH_TOKEN_PATH": str(self.token_file)}
        prog = ("import ray, json\n"
                f"ray.init(address={self.address!r}, namespace='tessera', log_to_driver=False, "
                "logging_level='ERROR')\n" + code)
        r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    def pids(self) -> list[int]:
        """Every live process of these nodes (by session and marker, or by temp dir)."""
        return cluster_pids(str(self.temp_dir), self.sessions)

    def stop(self) -> None:
        for _ in range(3):
            if not (pids := self.pids()):
                return
            stop_pids(pids, 5.0)
