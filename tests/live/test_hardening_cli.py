"""Issue 30, item 6 (the CLI side): a tenant's strings never drive the reader's terminal, and
tokens stay off command lines.

The hostile text is what a tenant can put in a job: escape sequences that clear the screen
(``ESC [2J``), set the window title (``ESC ]0;…BEL``), the one-byte CSI (``\\x9b``), a carriage
return that overwrites a line, a bidi override that reorders it, and rich markup.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from tessera.cli.job_text import job_lines
from tessera.cli.live import register
from tessera.cli.logs import register as register_logs
from tessera.live.client import Client
from tessera.live.service import LiveService
from tests.live.helpers import ADMIN, TEAM_A, ServerThread, auth, wait_for

runner = CliRunner()
HOSTILE = "a\x1b[2J\x1b]0;pwned\x07b\x9b31m\rc\u202ed[red]e[/red]\x00"
#: Characters that must never reach the terminal from a tenant's text.
RAW = ("\x1b", "\x07", "\x9b", "\r", "\u202e", "\x00")


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    register_logs(a)
    return a


def _clean(out: str) -> None:
    for c in RAW:
        assert c not in out, (c, out)


# -- the helper ---------------------------------------------------------------------------------

def test_safe_escapes_controls_and_bidi_keeps_the_rest() -> None:
    from tessera.cli.terminal import safe

    assert safe(HOSTILE) == ("a\\x1b[2J\\x1b]0;pwned\\x07b\\x9b31m\\x0dc\\u202ed[red]e[/red]"
                             "\\x00")
    assert safe("line 1\n\tline 2\n", keep_lines=True) == "line 1\n\tline 2\n"
    assert safe("line 1\nline 2") == "line 1\\x0aline 2"  # a one-line field stays one line
    # Unicode's line and paragraph separators break lines in some terminals and pagers too.
    assert safe("a\u2028b\u2029c", keep_lines=True) == "a\\u2028b\\u2029c"
    assert safe("naïve — 東京 ✓ \\x1b") == "naïve — 東京 ✓ \\x1b"  # printable text untouched
    assert safe(None) == "None" and safe(42) == "42"


# -- every command that prints a tenant's text --------------------------------------------------

def _hostile_job() -> dict[str, Any]:
    return {"job_id": "j-0000000001", "name": "n" + HOSTILE, "queue": "team-a",
            "state": "pending", "final": False, "gpus": 1, "flavors": [], "priority": 1.0,
            "max_retries": 0, "attempts": 0, "runs": 0, "command": ["/bin/echo", HOSTILE],
            "model": None, "job_type": "command", "requires_locality": False,
            "submitted_s": 1.0e9, "started_s": None, "finished_s": None, "reason": HOSTILE,
            "exit_code": None, "placement": None, "global_batch": None, "elastic": None,
            "last_placement": {"run": 1, "status": "done", "held": False, "text": HOSTILE,
                               "nodes": []},
            "was": HOSTILE, "replayed": False,
            "events": [{"ts_s": 1.0e9, "kind": "note", "from": None, "to": None,
                        "detail": HOSTILE}]}


@pytest.mark.parametrize("args", [["jobs"], ["job", "j-0000000001"],
                                  ["explain", "j-0000000001"], ["cancel", "j-0000000001"],
                                  ["submit", "JOB"], ["logs", "j-0000000001"], ["queues"]])
def test_no_command_prints_a_tenants_control_characters(app: typer.Typer, args: list[str],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """Finding: a job's command with ``\\x1b[2J`` and ``\\x1b]0;…\\x07`` was printed raw by
    ``tessera jobs`` and ``tessera job``. Every command, fed an answer full of hostile text,
    prints none of it raw (and no rich markup is interpreted)."""
    job = _hostile_job()
    answers = {
        "jobs": lambda *a: [job], "job": lambda *a: job, "cancel": lambda *a: job,
        "explain": lambda *a: {**job, "lines": [HOSTILE]},
        "submit_yaml": lambda *a: job,
        "logs": lambda *a: {"run": 1, "running": False, "final": True, "text": HOSTILE,
                            "next_offset": 9, "skipped_bytes": 0},
        "queues": lambda *a: [{"name": HOSTILE, "nominal_gpus": 1, "borrowing_limit_gpus": None,
                               "used_gpus": 0, "pending": 1, "running": 0}],
    }
    for name, fn in answers.items():
        monkeypatch.setattr(Client, name, fn)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: n\ncommand: x\n")
    args = [str(spec) if a == "JOB" else a for a in args]
    r = runner.invoke(app, args, env={"TESSERA_TOKEN": "t"})
    assert r.exit_code == 0, r.output
    _clean(r.output)
    assert "\\x1b" in r.output or "\\x1b" in r.output.replace("\n", ""), r.output
    if args[0] in ("jobs", "queues"):
        assert "[red]" in r.output  # printed as text, not taken as markup


def test_job_lines_escape_every_field_and_event() -> None:
    lines = job_lines(_hostile_job(), now_s=1.0e9 + 5)
    text = "\n".join(lines)
    _clean(text)
    # quoted as a shell would need it (shlex.join), escapes visible inside the quotes
    assert any(ln.strip().startswith("command: /bin/echo 'a\\x1b[2J") for ln in lines), lines
    assert sum("\\x1b]0;pwned\\x07" in ln for ln in lines) >= 4  # name, reason, command, event


def test_logs_escape_by_default_and_raw_opts_out(app: typer.Typer, server: ServerThread,
                                                service: LiveService) -> None:
    """A real job writing escapes: ``tessera logs`` shows them as text, lines kept;
    ``--raw`` prints them as written."""
    r = httpx.post(server.url + "/api/jobs", headers=auth(TEAM_A), json={
        "name": "loud", "command": r"printf 'one\n\033[2J\033]0;pwned\007two\rthree\n'"})
    jid = r.json()["job_id"]
    wait_for(lambda: service.store.get(jid).final, 20, "the job")  # type: ignore[union-attr]
    env = {"TESSERA_SERVER": server.url, "TESSERA_TOKEN": ADMIN}
    out = runner.invoke(app, ["logs", jid], env=env).output
    _clean(out)
    assert out.splitlines() == ["one", "\\x1b[2J\\x1b]0;pwned\\x07two\\x0dthree"]
    raw = runner.invoke(app, ["logs", jid, "--raw"], env=env).output
    assert "\x1b[2J\x1b]0;pwned\x07two\rthree" in raw


def test_tessera_job_escapes_a_real_jobs_command(app: typer.Typer, server: ServerThread) -> None:
    r = httpx.post(server.url + "/api/jobs", headers=auth(TEAM_A),
                   json={"name": "esc", "command": ["/bin/echo", "\x1b[2J\x1b]0;pwned\x07"]})
    out = runner.invoke(app, ["job", r.json()["job_id"]],
                        env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": ADMIN}).output
    _clean(out)
    assert "command: /bin/echo '\\x1b[2J\\x1b]0;pwned\\x07'" in out


# -- tokens: --token-file and TESSERA_TOKEN preferred, --token warned about ---------------------

def test_token_file_and_environment_work_without_a_warning(app: typer.Typer,
                                                           server: ServerThread,
                                                           tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text(TEAM_A + "\n")
    r = runner.invoke(app, ["jobs", "--json", "--token-file", str(tok)],
                      env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": ""})
    assert r.exit_code == 0 and json.loads(r.stdout) == [] and r.stderr == "", r.output
    r = runner.invoke(app, ["jobs", "--json"],
                      env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": TEAM_A})
    assert r.exit_code == 0 and r.stderr == "", r.output


def test_token_on_the_command_line_works_with_a_warning(app: typer.Typer,
                                                        server: ServerThread) -> None:
    """Finding: ``--token`` is visible in ``ps``; it still works, and says so."""
    r = runner.invoke(app, ["queues", "--json", "--token", ADMIN],
                      env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": ""})
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 2, r.output
    warning = r.stderr.strip()
    assert warning.startswith("warning: --token") and "`ps`" in warning, r.stderr
    assert "--token-file" in warning and len(warning.splitlines()) == 1


def test_token_file_wins_over_the_environment(app: typer.Typer, server: ServerThread,
                                              tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text(ADMIN)
    r = runner.invoke(app, ["queues", "--json", "--token-file", str(tok)],
                      env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": TEAM_A})
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 2, r.output  # the admin's view


@pytest.mark.parametrize(("setup", "message"), [
    ("both", "not both"), ("empty", "is empty"), ("missing", "cannot read the token file")])
def test_bad_token_flags_are_one_line_errors(app: typer.Typer, tmp_path: Path, setup: str,
                                             message: str) -> None:
    tok = tmp_path / "token"
    if setup != "missing":
        tok.write_text("" if setup == "empty" else "x")
    args = ["jobs", "--token-file", str(tok)] + (["--token", "y"] if setup == "both" else [])
    r = runner.invoke(app, args, env={"TESSERA_SERVER": "http://127.0.0.1:9"})
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output


def test_every_client_command_takes_a_token_file(app: typer.Typer) -> None:
    import typer.main

    group: Any = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        opts = {o for p in cmd.params for o in p.opts}
        if "--token" in opts:
            assert "--token-file" in opts, name


def test_submit_sends_an_idempotency_key(app: typer.Typer, server: ServerThread,
                                         service: LiveService, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: keyed\ncommand: 'true'\n")
    r = runner.invoke(app, ["submit", str(spec)],
                      env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": TEAM_A})
    assert r.exit_code == 0 and r.output.startswith("submitted j-"), r.output
    with service.store.tx() as db:
        keys = db.execute("SELECT principal, key, job_id FROM idempotency_keys").fetchall()
    assert len(keys) == 1 and keys[0][0] == "a@team-a" and len(keys[0][1]) == 36
    assert keys[0][2] in r.output
