"""Contained ranks under Ray: a rank host that dies takes its commands' whole trees with it,
and a host reused by the next job leaks nothing of the last one into it.

Opt-in (``-m ray``): an embedded Ray costs several seconds to start.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.live.executors import contain
from tests.live.helpers import wait_for

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def embedded_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A local Ray cluster. Ray 2.60 writes a new token to ``~/.ray/auth_token`` when it starts
    one, and sets ``RAY_AUTH_MODE=token`` in this process: a ``HOME`` of the test's own keeps the
    token out of the real one (where every later Ray client of this user, a service among them,
    would find and present it), and the variables are put back afterwards, so a later test's
    client of an unauthenticated cluster is not asked for a token."""
    from tests.live.conftest import RAY_AUTH_VARS, restore_ray_env

    saved = {k: os.environ.get(k) for k in ("HOME", *RAY_AUTH_VARS)}
    os.environ["HOME"] = str(tmp_path_factory.mktemp("ray-home"))
    try:
        ray.init(num_cpus=1, num_gpus=0, namespace="tessera-contain-test",
                 include_dashboard=False, log_to_driver=False)
        yield
        ray.shutdown()
    finally:
        restore_ray_env(saved)


def _key(run: int = 1) -> tuple[str, int, int]:
    return (f"j-{uuid.uuid4().hex[:10]}", run, 0)


def _env(tmp_path: Path, key: tuple[str, int, int]) -> dict[str, str]:
    return {"RANK": "0", "TESSERA_RUN": str(key[1]), "TESSERA_JOB_ID": key[0],
            "TESSERA_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "TESSERA_GRACE_S": "1"}


def _logs(tmp_path: Path) -> Any:
    """Where the host logs the test's ranks: a runs dir of the test's own."""
    from tessera.live.executors.logs import RankLogs

    return RankLogs(str(tmp_path / "runs"), 1 << 20)


def _host() -> Any:
    from tessera.live.executors.ray.worker import HOST_CONCURRENCY, RankHost

    return RankHost.options(max_concurrency=HOST_CONCURRENCY).remote()  # type: ignore


def _tree(pid: int) -> dict[int, int]:
    start = contain.start_time(pid)
    return {} if start is None else {pid: start, **contain.tree(pid)}


def _alive(procs: dict[int, int]) -> list[int]:
    return [p for p, s in procs.items() if contain.start_time(p) == s]


def _ended(host: Any, key: tuple[str, int, int]) -> bool:
    return bool(ray.get(host.poll.remote(key))[0] == "exited")


def test_killed_host_takes_the_commands_tree_with_it(embedded_ray: None,
                                                     tmp_path: Path) -> None:
    host, key = _host(), _key()
    pid = ray.get(host.start.remote(key, ["sh", "-c", "setsid sleep 300 & sleep 300 & wait"],
                                    _env(tmp_path, key), "0", _logs(tmp_path)))
    wait_for(lambda: len(_tree(pid)) >= 4, what="guardian, sh and two sleeps")
    tree = _tree(pid)
    ray.kill(host)
    wait_for(lambda: _alive(tree) == [], timeout_s=10, what="the rank's processes to die")


def test_rank_that_cannot_exec_says_why(embedded_ray: None, tmp_path: Path) -> None:
    host, key = _host(), _key()
    ray.get(host.start.remote(key, ["/nonexistent/binary"], _env(tmp_path, key), "0",
                              _logs(tmp_path)))
    wait_for(lambda: _ended(host, key), what="the rank to end")
    assert ray.get(host.poll.remote(key)) == ("exited", contain.EXEC_FAILED_RC, False)
    assert ray.get(host.outcome.remote(key)) == (
        "exec failed: No such file or directory: /nonexistent/binary", False)
    ray.kill(host)


def test_rank_stops_at_max_runtime_and_its_env_is_clean(embedded_ray: None,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    host, key = _host(), _key()
    ray.get(host.start.remote(key, ["sh", "-c", f"env > {out}; exec sleep 30"],
                              {**_env(tmp_path, key), "TESSERA_MAX_RUNTIME_S": "1"}, "3",
                              _logs(tmp_path)))
    wait_for(lambda: _ended(host, key), what="the time limit")
    assert ray.get(host.outcome.remote(key)) == ("exceeded max_runtime_s=1", True)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert "RAY_ADDRESS" not in env and not any(k.startswith("RAY_") for k in env)
    assert env["PATH"].split(":")[0] == os.path.dirname(sys.executable)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"  # the GPU the executor passed, not the host's
    ray.kill(host)


def test_next_runs_rank_starts_only_after_the_earlier_runs_processes_are_gone(
        embedded_ray: None, tmp_path: Path) -> None:
    from tessera.live.executors.ray.worker import log_path

    orphan = _spawn_orphan()
    try:
        first = _key(1)
        second = (first[0], 2, 0)
        runs = _logs(tmp_path).runs_dir
        log_path(runs, *first).parent.mkdir(parents=True)
        contain.record(str(log_path(runs, *first).with_suffix(".pids")), orphan)
        host = _host()
        ray.get(host.start.remote(second, ["true"], _env(tmp_path, second), "0", _logs(tmp_path)))
        assert _alive(orphan) == []
        ray.kill(host)
    finally:
        contain.kill_and_wait(orphan)


HOSTILE = ("pwd > {out}/cwd-before; cd /; export LEAKED=1; "
           "(setsid sleep 300 & echo $! > {out}/escaped); sleep 300 & echo $! > {out}/child; "
           "echo started > {out}/ready")
PEACEFUL = "pwd > {out}/cwd; env > {out}/env"


def test_a_reused_host_leaks_no_env_cwd_or_process_of_a_hostile_job(
        embedded_ray: None, tmp_path: Path) -> None:
    """A job that changes its cwd, exports variables and leaves children (one escaped into its
    own session) ends; the next job on the same host sees none of it."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    host, first, second = _host(), _key(), _key()
    ray.get(host.start.remote(first, ["sh", "-c", HOSTILE.format(out=a)],
                              {**_env(tmp_path, first), "JOB_A_ONLY": "x"}, "0", _logs(tmp_path)))
    wait_for(lambda: _ended(host, first), what="the hostile job to end")
    left = {int((a / n).read_text()) for n in ("escaped", "child")}
    wait_for(lambda: not any(contain.start_time(p) for p in left), timeout_s=10,
             what="the hostile job's children to be killed")
    assert ray.get(host.forget.remote(first))["rc"] == 0
    assert ray.get(host.keys.remote()) == []
    ray.get(host.start.remote(second, ["sh", "-c", PEACEFUL.format(out=b)],
                              _env(tmp_path, second), "1", _logs(tmp_path)))
    wait_for(lambda: _ended(host, second), what="the next job to end")
    env = dict(line.split("=", 1) for line in (b / "env").read_text().splitlines() if "=" in line)
    assert "LEAKED" not in env and "JOB_A_ONLY" not in env
    assert env["TESSERA_JOB_ID"] == second[0] and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert (b / "cwd").read_text() == (a / "cwd-before").read_text() != "/\n"
    ray.kill(host)


def test_a_rank_starts_at_most_once_and_forget_kills_what_runs(embedded_ray: None,
                                                               tmp_path: Path) -> None:
    host, key = _host(), _key()
    logs = _logs(tmp_path)
    pid = ray.get(host.start.remote(key, ["sleep", "300"], _env(tmp_path, key), "0", logs))
    assert ray.get(host.start.remote(key, ["sleep", "300"], _env(tmp_path, key), "0", logs)) == pid
    tree = _tree(pid)
    record = ray.get(host.forget.remote(key))
    assert _alive(tree) == [] and record["rc"] != 0
    assert ray.get(host.poll.remote(key)) == ("absent", None, False)
    # The same rank again (a host restarted after a crash would be asked this): refused, the
    # claim file beside its log says it started once already.
    assert ray.get(host.start.remote(key, ["sleep", "300"], _env(tmp_path, key), "0",
                                     logs)) == -1
    wait_for(lambda: _ended(host, key), what="the refused rank's exit record")
    assert ray.get(host.poll.remote(key)) == ("exited", contain.EXEC_FAILED_RC, False)
    assert ray.get(host.outcome.remote(key))[0].startswith("lost: this rank was started")
    ray.kill(host)


def test_a_rank_polls_exited_only_once_its_exit_record_holds_its_log(embedded_ray: None,
                                                                     tmp_path: Path) -> None:
    """The service learns a run ended from a poll and releases it at once: the host drops the
    rank, and until the service has saved the exit record, that record in the KV is all a log
    read can answer from. So the record is written before any poll says the rank exited (a
    read after ``succeeded`` once found no log)."""
    from tessera.live.executors.ray.records import exit_key, get

    host, key = _host(), _key()
    ray.get(host.start.remote(key, ["sh", "-c", "echo the-last-words"], _env(tmp_path, key),
                              "0", _logs(tmp_path)))
    polls = 0
    while ray.get(host.poll.remote(key))[0] != "exited":  # as tight as the service can poll
        polls += 1
        assert polls < 100_000, "the rank never ended"
    rec = get(exit_key(*key))
    assert rec is not None and "the-last-words" in rec["tail"], rec
    ray.kill(host)


def _spawn_orphan() -> dict[int, int]:
    """A ``sleep`` in its own session whose parent already exited (like a leftover of a run
    whose guardian was killed); returns it as ``pid -> start time``."""
    import subprocess

    out = subprocess.run(["sh", "-c", "setsid sleep 300 > /dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True).stdout
    pid = int(out.strip())
    wait_for(lambda: contain.start_time(pid) is not None, what="the orphan")
    return {pid: contain.start_time(pid) or 0}
