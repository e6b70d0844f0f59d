"""Contained ranks under Ray: a rank actor that dies takes its command's whole tree with it.

Opt-in (``-m ray``): an embedded Ray costs several seconds to start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.live.executors import contain
from tests.live.helpers import wait_for

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def embedded_ray() -> Iterator[None]:
    ray.init(num_cpus=1, num_gpus=0, namespace="tessera-contain-test", include_dashboard=False,
             log_to_driver=False)
    yield
    ray.shutdown()


def _run_dir(tmp_path: Path, run: int = 1) -> Path:
    d = tmp_path / "state" / "runs" / "j-test" / str(run)
    d.mkdir(parents=True)
    return d


def _env(tmp_path: Path, run: int = 1) -> dict[str, str]:
    return {"RANK": "0", "TESSERA_RUN": str(run), "TESSERA_JOB_ID": "j-test",
            "TESSERA_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "TESSERA_GRACE_S": "1"}


def _worker() -> Any:
    from tessera.live.executors.ray import RankWorker

    return RankWorker.remote()  # type: ignore[attr-defined]


def _tree(pid: int) -> dict[int, int]:
    start = contain.start_time(pid)
    return {} if start is None else {pid: start, **contain.tree(pid)}


def _alive(procs: dict[int, int]) -> list[int]:
    return [p for p, s in procs.items() if contain.start_time(p) == s]


def test_killed_rank_actor_takes_the_commands_tree_with_it(embedded_ray: None,
                                                          tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    worker = _worker()
    pid = ray.get(worker.start.remote(["sh", "-c", "setsid sleep 300 & sleep 300 & wait"],
                                      _env(tmp_path), str(run_dir / "rank-0.log")))
    wait_for(lambda: len(_tree(pid)) >= 4, what="guardian, sh and two sleeps")
    tree = _tree(pid)
    ray.kill(worker)
    wait_for(lambda: _alive(tree) == [], timeout_s=10, what="the rank's processes to die")


def test_rank_that_cannot_exec_says_why(embedded_ray: None, tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    worker = _worker()
    ray.get(worker.start.remote(["/nonexistent/binary"], _env(tmp_path),
                                str(run_dir / "rank-0.log")))
    wait_for(lambda: ray.get(worker.poll.remote())[0] == "exited", what="the rank to end")
    assert ray.get(worker.poll.remote()) == ("exited", contain.EXEC_FAILED_RC, False)
    assert ray.get(worker.outcome.remote()) == (
        "exec failed: No such file or directory: /nonexistent/binary", False)
    ray.kill(worker)


def test_rank_stops_at_max_runtime_and_its_env_is_clean(embedded_ray: None, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _run_dir(tmp_path)
    out = tmp_path / "env.txt"
    worker = _worker()
    ray.get(worker.start.remote(["sh", "-c", f"env > {out}; exec sleep 30"],
                                {**_env(tmp_path), "TESSERA_MAX_RUNTIME_S": "1"},
                                str(run_dir / "rank-0.log")))
    wait_for(lambda: ray.get(worker.poll.remote())[0] == "exited", what="the time limit")
    assert ray.get(worker.outcome.remote()) == ("exceeded max_runtime_s=1", True)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert "RAY_ADDRESS" not in env and not any(k.startswith("RAY_") for k in env)
    assert env["PATH"].split(":")[0] == os.path.dirname(sys.executable)
    ray.kill(worker)


def test_next_runs_rank_starts_only_after_the_earlier_runs_processes_are_gone(
        embedded_ray: None, tmp_path: Path) -> None:
    orphan = _spawn_orphan()
    try:
        contain.record(str(_run_dir(tmp_path, 1) / "rank-0.pids"), orphan)
        worker = _worker()
        ray.get(worker.start.remote(["true"], _env(tmp_path, 2),
                                    str(_run_dir(tmp_path, 2) / "rank-0.log")))
        assert _alive(orphan) == []
        ray.kill(worker)
    finally:
        contain.kill_and_wait(orphan)


def _spawn_orphan() -> dict[int, int]:
    """A ``sleep`` in its own session whose parent already exited (like a leftover of a run
    whose guardian was killed); returns it as ``pid -> start time``."""
    import subprocess

    out = subprocess.run(["sh", "-c", "setsid sleep 300 > /dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True).stdout
    pid = int(out.strip())
    wait_for(lambda: contain.start_time(pid) is not None, what="the orphan")
    return {pid: contain.start_time(pid) or 0}
