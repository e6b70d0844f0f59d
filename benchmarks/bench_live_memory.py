"""Live service memory and poll size with many large jobs (issue 30, finding 5).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_live_memory.py [--jobs N]
[--before OLD_TREE/src]``

A server process of its own runs the service and uvicorn as ``tessera serve`` does (local
executor, FIFO, 8 GPUs); this process is its client and reads the server's resident memory
(``VmRSS``) and CPU time from ``/proc``. One tenant then:

1. submits ``--jobs`` jobs (default 200), each with ~0.94 MB of ``env`` (32 values of 30,000
   characters, within the per-request limits) and an 8,100-character command; 8 of them run
   (``sleep``), the rest wait;
2. while the dashboard polls (``/api/cluster``, ``/api/queues``, ``/api/jobs?limit=200`` once a
   second) for ``--poll-s`` seconds: the server's CPU share, and the bytes of one poll;
3. cancels every job and waits for the runs to exit;
4. the server is restarted on the same state, and the admin lists ``GET /api/jobs`` once.

The server's RSS is printed after each step (and the state dir's size), for this tree and,
with ``--before``, for an older tree's sources side by side (the server process runs on them;
this client is the same). The caps of this tree (:mod:`tessera.live.totals`) refuse a queue's
jobs past 256 MiB of stored specs, about 270 of these jobs: the ``accepted`` row says how many
were stored. Resident memory is the allocator's as much as the service's (freed memory is not
always returned to the system): read the differences between the trees, not the last megabyte.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TOKEN = "bench-token"
CLUSTER = "v100:4,t4:4"
ENV = {f"BLOB_{i:02d}": chr(ord("a") + i % 26) * 30_000 for i in range(32)}
COMMAND = "sleep 600 #" + "x" * 8089  # 8,100 characters
POLL = ("/api/cluster", "/api/queues", "/api/jobs?limit=200")


def serve_child(state: str, port: int) -> None:
    """``--serve-child``: the service and uvicorn on ``127.0.0.1:port`` until stdin closes."""
    import uvicorn

    from tessera.live.api import create_app
    from tessera.live.executors.local import LocalExecutor
    from tessera.live.layout import default_work_dir
    from tessera.live.service import LiveService, ServiceOptions
    from tessera.live.store import Store
    from tessera.live.tenancy import CONFIG_NAME, hash_token, load_tenancy
    from tessera.model.cluster import load_cluster

    root = Path(state)
    if not (root / CONFIG_NAME).exists():
        root.mkdir(parents=True, mode=0o700)
        (root / CONFIG_NAME).write_text(
            "queues:\n- {name: bench, nominal_gpus: 8}\n"
            f"tokens:\n- {{name: admin, sha256: {hash_token(TOKEN)}, queue: null}}\n")
    work = default_work_dir(root)
    svc = LiveService(Store(root / "state.db"), LocalExecutor(work / "runs", grace_s=1.0),
                      load_cluster(CLUSTER, 4), load_tenancy(root), "fifo", work,
                      ServiceOptions(period_s=1.0, poll_s=0.05, grace_s=1.0))
    svc.start()
    try:
        from tessera.live.server import uvicorn_config
        config = uvicorn_config(create_app(svc), host="127.0.0.1", port=port)
    except ImportError:  # an older tree
        config = uvicorn.Config(create_app(svc), host="127.0.0.1", port=port,
                                log_level="warning")
    server = uvicorn.Server(config)
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.05)
    print("ready", flush=True)
    sys.stdin.read()
    server.should_exit = True
    th.join(timeout=10)
    svc.stop()


class Server:
    """A ``--serve-child`` process on the sources in ``src``, and calls to it."""

    def __init__(self, state: Path, src: str) -> None:
        from tessera.live.executors.base import free_port

        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve-child", str(state),
                                      str(self.port)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the server process did not start")
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        head = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        self.conn.request(method, path, None if body is None else json.dumps(body), head)
        r = self.conn.getresponse()
        return r.status, r.read()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.conn.close()
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _settle(s: Server) -> float:
    time.sleep(1.0)
    return s.rss_mb()


def _du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def measure(root: Path, src: str, jobs: int, poll_s: float) -> dict[str, str]:
    """The table's column for the sources in ``src``."""
    state = root / "state"
    out: dict[str, str] = {}
    s = Server(state, src)
    try:
        out["RSS at start (MB)"] = f"{_settle(s):.0f}"
        accepted = 0
        for _ in range(jobs):
            code, _ = s.call("POST", "/api/jobs", {"name": "big", "queue": "bench",
                                                   "command": COMMAND, "env": ENV})
            accepted += code == 201
        out["jobs accepted"] = f"{accepted} / {jobs}"
        out[f"RSS after {jobs} submissions (MB)"] = f"{_settle(s):.0f}"
        cpu0_s, t0 = s.cpu_s(), time.monotonic()
        poll_bytes = 0
        while time.monotonic() - t0 < poll_s:
            poll_bytes = sum(len(s.call("GET", p)[1]) for p in POLL)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0) % 1.0))
        out["server CPU while polled (% of a core)"] = \
            f"{100 * (s.cpu_s() - cpu0_s) / (time.monotonic() - t0):.0f}"
        out["dashboard poll (bytes, 3 requests)"] = f"{poll_bytes:,}"
        out["RSS after polling (MB)"] = f"{s.rss_mb():.0f}"
        _, body = s.call("GET", "/api/jobs?limit=10000")
        for j in json.loads(body)["jobs"]:
            if not j["final"]:
                s.call("POST", f"/api/jobs/{j['job_id']}/cancel")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
                f["used_gpus"] for f in json.loads(s.call("GET", "/api/cluster")[1])["flavors"]):
            time.sleep(0.2)
        out["RSS after cancelling all (MB)"] = f"{_settle(s):.0f}"
    finally:
        s.stop()
    out["state dir (MB)"] = f"{_du_mb(state):.0f}"
    s = Server(state, src)
    try:
        out["RSS after restart (MB)"] = f"{_settle(s):.0f}"
        code, body = s.call("GET", "/api/jobs")
        out["admin GET /api/jobs (bytes)"] = f"{len(body):,}"
        out["RSS after restart + GET /api/jobs (MB)"] = f"{_settle(s):.0f}"
    finally:
        s.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--poll-s", type=float, default=5.0)
    ap.add_argument("--before", help="an older tree's src directory, measured side by side")
    ap.add_argument("--serve-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_child:
        serve_child(args.serve_child[0], int(args.serve_child[1]))
        return
    here = str(Path(__file__).resolve().parent.parent / "src")
    trees = [("before", args.before), ("this tree", here)] if args.before else \
        [("this tree", here)]
    cols: list[tuple[str, dict[str, str]]] = []
    for name, src in trees:
        with tempfile.TemporaryDirectory(prefix="tessera-bench-mem-") as tmp:
            cols.append((name, measure(Path(tmp), src, args.jobs, args.poll_s)))
    keys = list(dict.fromkeys(k for _, c in cols for k in c))
    width = max(len(k) for k in keys)
    print(f"{'':{width}}  " + "  ".join(f"{n:>14}" for n, _ in cols))
    for k in keys:
        print(f"{k:{width}}  " + "  ".join(f"{c.get(k, '-'):>14}" for _, c in cols))


if __name__ == "__main__":
    main()
