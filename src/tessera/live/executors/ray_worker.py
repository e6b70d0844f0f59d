"""The Ray rank actor: one per rank of a run, on the node Ray placed it.

:class:`RankWorker` is what the Ray executor (:mod:`tessera.live.executors.ray`) creates for
each rank: a named, detached actor holding one GPU of the run's placement group. It starts the
rank's command at most once, under the same guardian as the local runner
(:mod:`tessera.live.executors.contain`), logs to a file on its own node, and when the command
ends writes an exit record to Ray's KV (:mod:`tessera.live.executors.ray_records`), so that a
restarted service learns how the rank ended even after the actor is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import ray

from tessera.live.executors import contain
from tessera.live.executors.base import (
    CHECKPOINTS_ROOT_VAR,
    LogChunk,
    free_port,
    launch_env,
    prepare_checkpoint_dir,
    read_log_file,
)
from tessera.live.executors.ray_records import exit_record, put

#: How often the exit watcher looks whether the command has ended (s).
EXIT_POLL_S = 0.2


@ray.remote(num_cpus=0, max_restarts=0)
class RankWorker:
    """One rank: runs the command once, contained, reports its exit, forwards stop signals.

    The command runs under a guardian (:mod:`~tessera.live.executors.contain`), exactly as under
    the local runner: its whole process tree stays below the guardian, the guardian kills the
    tree when this actor's process dies (even by SIGKILL, e.g. ``ray.kill``), when the command
    ends, or when the run exceeds ``TESSERA_MAX_RUNTIME_S``; its pids are recorded next to the
    rank's log. Before starting, the actor kills what earlier runs of the job left on this node
    (their records), so no attempt starts beside an earlier one. The environment is
    :func:`~tessera.live.executors.base.launch_env` of what the executor passes: a clean base,
    never the Ray worker's own environment; ``TESSERA_RUN_AS`` names the user to run as.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_ticks = 0
        self.status_path = ""
        self.failed = ""  # why the guardian itself could not start
        self.port: int | None = None
        self.stopped = False

    def rendezvous(self) -> tuple[str, int]:
        if self.port is None:
            self.port = free_port("0.0.0.0")
        return ray.util.get_node_ip_address(), self.port

    def start(self, argv: list[str], env: dict[str, str], log_path: str) -> int:
        """Start the command once (later calls return the same pid); ``-1``: it could not."""
        if self.proc is not None or self.failed:
            return self.proc.pid if self.proc is not None else -1
        full_env, user = launch_env(env)
        log = Path(log_path)
        run_dir, rank = log.parent, env.get("RANK", "0")
        self.status_path = str(run_dir / f"rank-{rank}.status")
        run = int(env.get("TESSERA_RUN", "1"))
        contain.sweep([str(d) for d in run_dir.parent.glob("*")
                       if d.name.isdigit() and int(d.name) < run])
        try:
            prepare_checkpoint_dir(env.get("TESSERA_CHECKPOINT_DIR", ""), user,
                                   Path(env.get(CHECKPOINTS_ROOT_VAR, "/nonexistent")))
            with open(log, "ab") as out:
                self.proc = contain.start_guardian({
                    "argv": argv, "env": full_env, "user": user,
                    "max_runtime_s": env.get("TESSERA_MAX_RUNTIME_S"),
                    "grace_s": env.get("TESSERA_GRACE_S", "10"), "status": self.status_path,
                    "record": str(run_dir / f"rank-{rank}.pids")}, out.fileno())
        except (OSError, ValueError, KeyError) as e:
            self.failed = contain.exec_failure(e)
            return -1
        self.start_ticks = contain.start_time(self.proc.pid) or 0
        return self.proc.pid

    def poll(self) -> tuple[str, int | None, bool]:
        if self.failed:
            return "exited", contain.EXEC_FAILED_RC, False
        if self.proc is None:
            return "absent", None, False
        rc = self.proc.poll()
        return ("running", None, False) if rc is None else ("exited", rc, self.stopped)

    def outcome(self) -> tuple[str, bool]:
        """Why the command ended, as its guardian saw it: ``(detail, timed_out)``; ``detail``
        is ``exec failed: ...`` for a command that could not start, ``exceeded
        max_runtime_s=...`` for one stopped at its limit, else empty."""
        if self.failed:
            return self.failed, False
        got = contain.read_status(self.status_path) if self.status_path else {}
        return str(got.get("detail", "")), bool(got.get("timed_out"))

    def stop(self, grace_s: float) -> None:
        """SIGTERM the whole tree (through the guardian); kill it after ``grace_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.stopped = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        threading.Timer(grace_s, self.kill).start()

    def kill(self) -> None:
        """Kill the guardian and every process of the command; return once they are gone."""
        if self.proc is not None and self.proc.poll() is None:
            contain.kill_and_wait({self.proc.pid: self.start_ticks})
            self.proc.poll()

    # -- added for durability and log retrieval (RayExecutor); the methods above are unchanged.

    def prepare_log(self, job_id: str, run: int, rank: int) -> str:
        """Create this rank's log file's folder on the actor's own node; returns its path."""
        base = os.environ.get("TESSERA_RAY_LOG_DIR") or tempfile.gettempdir()
        path = Path(base) / "tessera-ray-logs" / job_id / str(run) / f"rank-{rank}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path: str | None = str(path)
        return str(path)

    def watch(self, key: str) -> None:
        """Write the exit record (status, stop flag, log tail) to Ray's KV at ``key`` once the
        command ends, so a restarted service finds it even when this actor is gone."""
        def wait() -> None:
            while not self.failed and (self.proc is None or self.proc.poll() is None):
                time.sleep(EXIT_POLL_S)
            rc = contain.EXEC_FAILED_RC if self.proc is None else self.proc.returncode
            detail, timed_out = self.outcome()
            put(key, exit_record(rc, self.stopped, getattr(self, "log_path", None), detail,
                                 timed_out))

        threading.Thread(target=wait, daemon=True).start()

    def read_log(self, offset: int, limit: int) -> LogChunk | None:
        """Up to ``limit`` bytes of this rank's log from ``offset``."""
        return read_log_file(getattr(self, "log_path", None), offset, limit)
