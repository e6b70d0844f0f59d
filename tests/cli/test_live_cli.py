"""The live client commands against a real server: token hints, ``--status``, ``job`` output,
and what ``serve`` prints at start."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tessera.cli.live import register
from tests.live.helpers import ADMIN, TEAM_A, ServerThread, make_service, wait_for

runner = CliRunner()
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    svc = make_service(tmp_path / "state")
    s = ServerThread(svc)
    yield s
    s.stop()
    svc.stop()


def _cli(app: typer.Typer, server: ServerThread, token: str, *args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args), env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": token})
    return r.exit_code, r.output


def test_missing_token_says_how_to_pass_one(app: typer.Typer, server: ServerThread) -> None:
    code, out = _cli(app, server, "", "jobs")
    assert code == 2 and "missing bearer token (HTTP 401)" in out
    hint = next(line for line in out.splitlines() if line.startswith("hint:"))
    assert "--token" in hint and "TESSERA_TOKEN" in hint and "tessera serve" in hint
    assert "token-add" in hint and "Traceback" not in out


def test_unknown_token_says_restart_loads_new_ones(app: typer.Typer,
                                                   server: ServerThread) -> None:
    code, out = _cli(app, server, "not-a-token", "queues")
    assert code == 2 and "unknown token (HTTP 401)" in out and "restarts" in out


def test_unreachable_service_says_where_it_looked(app: typer.Typer) -> None:
    r = runner.invoke(app, ["jobs"], env={"TESSERA_SERVER": "http://127.0.0.1:9",
                                          "TESSERA_TOKEN": "x"})
    assert r.exit_code == 2 and "cannot reach http://127.0.0.1:9" in r.output
    assert "hint: is `tessera serve` running there?" in r.output


def _two_jobs(app: typer.Typer, server: ServerThread, tmp_path: Path) -> tuple[str, str]:
    """Two 4-GPU T4 jobs on a cluster with four T4s: the first runs, the second waits."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: train\ncommand: sleep 30\ngpus: 4\nflavors: [T4]\n")
    ids = [json.loads(_cli(app, server, TEAM_A, "submit", str(spec), "--json")[1])["job_id"]
           for _ in range(2)]
    wait_for(lambda: ids[0] in _cli(app, server, TEAM_A, "jobs", "--status", "running")[1],
             what="the first job to run")
    return ids[0], ids[1]


def test_jobs_filters_by_status(app: typer.Typer, server: ServerThread, tmp_path: Path) -> None:
    running, waiting = _two_jobs(app, server, tmp_path)
    code, out = _cli(app, server, TEAM_A, "jobs", "--status", "pending", "--json")
    assert code == 0 and [j["job_id"] for j in json.loads(out)] == [waiting]
    code, out = _cli(app, server, TEAM_A, "jobs", "--status", "running", "--json")
    assert code == 0 and [j["job_id"] for j in json.loads(out)] == [running]
    code, out = _cli(app, server, TEAM_A, "jobs", "--status", "waiting")
    assert code == 2 and "'waiting' is not a job state" in out and "pending" in out
    code, out = _cli(app, server, TEAM_A, "jobs", "--state", "pending")
    assert code == 2 and "No such option" in out


def test_job_prints_words_and_json_keeps_raw_values(app: typer.Typer, server: ServerThread,
                                                    tmp_path: Path) -> None:
    running, waiting = _two_jobs(app, server, tmp_path)
    for job_id in (running, waiting):
        code, out = _cli(app, server, ADMIN, "job", job_id)
        assert code == 0, out
        assert "None" not in out and "['" not in out and not re.search(r"\b\d{10}\.\d+", out)
        assert "request: 4 GPU(s) of T4" in out and ISO.search(out) and "→ pending" in out
    assert "placement: not placed" in _cli(app, server, ADMIN, "job", waiting)[1]
    code, out = _cli(app, server, ADMIN, "job", running)
    assert re.search(r"placement: 4×T4: 4 GPUs on node \S+$", out, re.M) and "(waited " in out
    code, out = _cli(app, server, ADMIN, "job", waiting, "--json")
    raw = json.loads(out)
    assert code == 0 and isinstance(raw["submitted_s"], float) and raw["placement"] is None


def test_serve_prints_token_api_and_dashboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from tessera.live import server
    from tessera.live.server import ServeConfig, serve

    monkeypatch.setattr(server, "run_http", lambda *a, **k: None)  # start, print, and return
    serve(ServeConfig(tmp_path / "state", "v100:4,t4:4", 8), "127.0.0.1", 8499)
    out = capsys.readouterr().out
    token = re.search(r"admin token \(shown once; stored hashed in .*\): (\S+)", out)
    assert token is not None
    assert f"export TESSERA_TOKEN={token.group(1)}" in out
    assert "API:       http://127.0.0.1:8499" in out
    assert f"dashboard: http://127.0.0.1:8499/dashboard#token={token.group(1)}" in out
    serve(ServeConfig(tmp_path / "state"), "127.0.0.1", 8499)  # a restart: token not shown
    again = capsys.readouterr().out
    assert "admin token" not in again and "dashboard#token=<your token>" in again



def test_token_add_prints_the_token_alone_and_says_when_it_counts(
        app: typer.Typer, tmp_path: Path) -> None:
    """stdout is the token alone (for scripts); stderr tells a person that a running service
    loads it when it restarts (else the token's first use is an unexplained 401)."""
    make_service(tmp_path / "state", start=False).stop()
    r = CliRunner().invoke(app, ["token-add", "ci", "--queue", "vision", "--state",
                                 str(tmp_path / "state")])
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r"\S{20,}\n", r.stdout)
    assert "queue 'vision'" in r.stderr and "restarts" in r.stderr
