"""How ``tessera serve`` starts: a busy port first, one service per state dir, and an admin
token that no later failure can lose."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from tessera.cli.live import register as register_clients
from tessera.cli.serve import register
from tessera.errors import SpecError
from tessera.live import server
from tessera.live.executors import local
from tessera.live.layout import StateLock
from tessera.live.server import ServeConfig, serve
from tessera.live.tenancy import load_tenancy

runner = CliRunner()


@pytest.fixture
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    register_clients(a)  # token-add
    return a


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.fixture
def no_http(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Replace uvicorn by a recorder of the socket it was handed."""
    handed: list[tuple[str, int]] = []
    monkeypatch.setattr(server, "run_http", lambda _app, sock: handed.append(sock.getsockname()))
    return handed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_busy_port_is_the_first_and_only_thing_said(app: typer.Typer, busy_port: int,
                                                      tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve", "--state", str(tmp_path / "state"), "--port",
                            str(busy_port)])
    assert r.exit_code == 2
    assert r.output.strip() == f"error: port {busy_port} is in use (Address already in use); " \
                               "choose --port"
    assert not (tmp_path / "state").exists()  # nothing was created either


def test_uvicorn_listens_on_the_socket_bound_first(tmp_path: Path,
                                                  no_http: list[tuple[str, int]]) -> None:
    port = _free_port()
    serve(ServeConfig(tmp_path / "state", "v100:4", 4), "127.0.0.1", port)
    assert no_http == [("127.0.0.1", port)]


def test_a_second_serve_on_the_same_state_dir_is_refused(tmp_path: Path,
                                                         no_http: list[tuple[str, int]]) -> None:
    state = tmp_path / "state"
    serve(ServeConfig(state, "v100:4", 4), "127.0.0.1", _free_port())  # creates the state
    holder = StateLock(state)
    holder.acquire()
    try:
        with pytest.raises(SpecError) as e:
            serve(ServeConfig(state), "127.0.0.1", _free_port())
        assert str(e.value) == (f"state dir {state} is in use by another tessera serve (pid "
                                f"{os.getpid()}); stop it, or pass another --state")
    finally:
        holder.release()
    serve(ServeConfig(state), "127.0.0.1", _free_port())  # the lock went with its holder
    assert len(no_http) == 2


def test_the_admin_token_is_printed_before_the_executor_can_fail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_http: list[tuple[str, int]],
        capsys: pytest.CaptureFixture[str]) -> None:
    def unreachable(*_a: object, **_k: object) -> None:
        raise ConnectionError("no Ray cluster at ray://10.0.0.9:10001")

    monkeypatch.setattr(local.LocalExecutor, "__init__", unreachable)
    state = tmp_path / "state"
    with pytest.raises(SpecError) as e:
        serve(ServeConfig(state, "v100:4", 4), "127.0.0.1", _free_port())
    assert str(e.value) == ("cannot start the local executor: ConnectionError: no Ray cluster "
                            "at ray://10.0.0.9:10001")
    printed = re.search(r"admin token \(shown once; stored hashed in .*\): (\S+)",
                        capsys.readouterr().out)
    assert printed is not None
    who = load_tenancy(state).authenticate(printed.group(1))
    assert who is not None and who.admin
    monkeypatch.undo()
    monkeypatch.setattr(server, "run_http", lambda *_a: None)
    serve(ServeConfig(state), "127.0.0.1", _free_port())  # a restart works, prints no token
    assert "admin token" not in capsys.readouterr().out


def test_a_failing_ray_address_is_one_line_and_the_token_survives(
        app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The address answered the connection check, then the executor failed to start: the
    admin token printed before it is not lost. (An address that does not answer at all is
    refused before anything is written: tests/live/test_ray_cluster.py.)"""
    from tessera.live import server
    from tessera.live.executors.ray.executor import RayExecutor

    def unreachable(*_a: object, **_k: object) -> None:
        raise ConnectionError("could not connect")

    monkeypatch.setattr(server, "connect_executor", lambda _cfg: None)
    monkeypatch.setattr(RayExecutor, "__init__", unreachable)
    r = runner.invoke(app, ["serve", "--state", str(tmp_path / "state"), "--port",
                            str(_free_port()), "--executor", "ray", "--ray-address",
                            "10.0.0.9:6379", "-c", "v100:4"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.splitlines()[0].startswith("admin token (shown once")
    assert r.output.splitlines()[-1] == ("error: cannot start the ray executor at "
                                         "10.0.0.9:6379: ConnectionError: could not connect")


def test_token_add_admin_from_the_command_line(app: typer.Typer, tmp_path: Path,
                                               no_http: list[tuple[str, int]]) -> None:
    state = tmp_path / "state"
    serve(ServeConfig(state, "v100:4", 4), "127.0.0.1", _free_port())
    r = runner.invoke(app, ["token-add", "--admin", "ops", "--state", str(state)])
    assert r.exit_code == 0
    who = load_tenancy(state).authenticate(r.stdout.strip())
    assert who is not None and who.admin and who.name == "ops"
    for args in (["token-add", "x", "--state", str(state)],
                 ["token-add", "--admin", "x", "--queue", "q", "--state", str(state)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "exactly one of --queue QUEUE" in r.output


@pytest.mark.parametrize("policy", ["min_total_duration", "allox", "no_such_policy"])
def test_a_policy_the_service_cannot_run_is_refused_before_any_state(
        app: typer.Typer, tmp_path: Path, policy: str) -> None:
    """Gavel's own non-packing policies run only in the simulator's Gavel loop (packing ones
    the service runs: tests/live/test_sharing.py). ``serve`` says so in one line and creates
    nothing."""
    r = runner.invoke(app, ["serve", "--state", str(tmp_path / "state"), "--port",
                            str(_free_port()), "-p", policy])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert line.startswith("error: ") and "\n" not in line
    assert ("--compat gavel" in line) if policy != "no_such_policy" else "no_such_policy" in line
    assert not (tmp_path / "state").exists()


def test_the_service_itself_refuses_a_gavel_only_policy(tmp_path: Path) -> None:
    from tessera.errors import SpecError
    from tests.live.helpers import make_service

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with pytest.raises(SpecError, match="--compat gavel"):
        make_service(state, policy="min_total_duration", start=False)


SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_shows_its_pid_and_says_why_it_stops(tmp_path: Path, sig: signal.Signals) -> None:
    """The banner names the PID to signal; a signal stops it with one line, in order (issue 31).

    In order: the service's own stop runs and the state lock is released, so a second
    ``serve`` on the same state dir starts at once.
    """
    state, port = tmp_path / "state", _free_port()
    cmd = [sys.executable, "-m", "tessera.cli", "serve", "--state", str(state), "--port",
           str(port), "--cluster", "v100:2", "--executor", "local"]
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert proc.stdout is not None
        banner = ""
        deadline = time.monotonic() + 60
        while "dashboard:" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            banner += line
        assert re.search(rf"^  pid:       {proc.pid}  \(", banner, re.M), banner
        while time.monotonic() < deadline:  # uvicorn answers: its signal handlers are set
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert (f"tessera serve (pid {proc.pid}) stopping on {sig.name}; runs keep going and are "
            "adopted at the next start") in out
    lock = StateLock(state)
    lock.acquire()  # released by the stopped service
    lock.release()
