"""``tessera logs``: a rank's output through the service (local executor here; Ray in
``test_ray.py`` and ``test_ray_multinode.py``)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from tessera.cli.logs import register
from tessera.live.service import LiveService
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, ServerThread, auth, wait_for

runner = CliRunner()
LINES = 'for i in 1 2 3; do echo "rank $RANK line $i"; sleep 0.3; done'


@pytest.fixture
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)

    @a.callback()
    def _root() -> None:
        """Two commands, so typer keeps the command name."""

    return a


def _logs(app: typer.Typer, server: ServerThread, token: str, *args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["logs", *args], env={"TESSERA_SERVER": server.url,
                                                 "TESSERA_TOKEN": token})
    return r.exit_code, r.output


def _submit(server: ServerThread) -> str:
    import httpx

    r = httpx.post(server.url + "/api/jobs", headers=auth(TEAM_A),
                   json={"name": "talk", "command": LINES, "gpus": 2, "queue": "team-a"})
    assert r.status_code == 201, r.text
    return str(r.json()["job_id"])


def test_follow_prints_a_ranks_whole_output_then_stops(app: typer.Typer,
                                                       server: ServerThread) -> None:
    jid = _submit(server)
    code, out = _logs(app, server, TEAM_A, jid, "--rank", "1", "--follow")
    assert code == 0, out
    assert [ln for ln in out.splitlines() if ln.startswith("rank")] == \
        [f"rank 1 line {i}" for i in (1, 2, 3)]


def test_logs_are_the_tenants_own_and_ranks_are_checked(app: typer.Typer,
                                                        server: ServerThread,
                                                        service: LiveService) -> None:
    jid = _submit(server)
    wait_for(lambda: service.store.get(jid).final, 20, "the job")  # type: ignore[union-attr]
    code, out = _logs(app, server, ADMIN, jid)
    assert code == 0 and "rank 0 line 3" in out
    code, out = _logs(app, server, TEAM_B, jid)
    assert code == 2 and f"no job '{jid}'" in out
    code, out = _logs(app, server, TEAM_A, jid, "--rank", "5")
    assert code == 2 and "has ranks 0...1, not 5" in out
