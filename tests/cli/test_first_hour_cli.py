"""The first hour of a new user at the command line (issue 31): ``--help`` piped to a file is
whole (no cut names or texts, no ``<bool>``), and ``simulate`` shows progress on a terminal
but never in ``--json`` or when its output is piped."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from rich.console import Console

from tessera.cli import app
from tessera.cli.help_text import reflow, tidy_help, walk
from tessera.cli.progress import SimProgress, show_progress
from tests.cli.runner import run_tessera


def _paths(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = [(path, cmd)]
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            out += _paths(sub, (*path, name))
    return out


def _squash(text: str) -> str:
    return "".join(text.split())


def test_every_commands_piped_help_is_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every option name and every help text of every command appears whole in its help piped
    to a file (wrapped is fine, cut is not), and no flag shows a ``<bool>`` placeholder."""
    root = tidy_help(typer.main.get_command(app), plain=True)
    problems: list[str] = []
    for path, cmd in _paths(root):
        code, out, _err = run_tessera([*path, "--help"], capsys, monkeypatch)
        where = "tessera " + " ".join(path)
        if code != 0:
            problems.append(f"{where}: exit {code}")
            continue
        flat = _squash(out)
        if "<bool>" in out:
            problems.append(f"{where}: shows <bool>")
        written = (cmd.help or "") + "".join(getattr(p, "help", None) or "" for p in cmd.params)
        if out.count("…") > written.count("…"):  # an ellipsis the texts do not have: a cut
            problems.append(f"{where}: cut with …")
        for p in cmd.params:
            if getattr(p, "hidden", False):
                continue
            for opt in [*p.opts, *getattr(p, "secondary_opts", [])]:
                if opt.startswith("-") and opt not in out:
                    problems.append(f"{where}: option {opt} cut or missing")
            if getattr(p, "help", None) and _squash(p.help) not in flat:
                problems.append(f"{where}: help of {p.name} cut: {p.help[:60]!r}")
        for name, sub in getattr(cmd, "commands", {}).items():
            if not sub.hidden and _squash(sub.short_help or "") not in flat:
                problems.append(f"{where}: listing of {name} cut")
    assert not problems, "\n".join(problems)


def test_help_text_has_no_hard_line_breaks_inside_a_paragraph() -> None:
    root = tidy_help(typer.main.get_command(app), plain=False)
    for cmd in walk(root):
        for para in (cmd.help or "").split("\n\n"):
            lines = para.splitlines()
            assert len(lines) == 1 or all(line.lstrip()[:2] in ("* ", "- ") or
                                          line.startswith(("    ", "\b"))
                                          for line in lines[1:]), (cmd.name, para)
    assert reflow("one\ntwo\n\nthree\nfour\n* five\n  six\n* seven\n\n    code\n    kept") \
        == "one two\n\nthree four\n* five six\n* seven\n\n    code\n    kept"


def test_flags_show_no_placeholder_on_a_terminal_either() -> None:
    root = tidy_help(typer.main.get_command(app), plain=False)
    simulate = root.commands["simulate"]  # type: ignore[attr-defined]
    flags = [p for p in simulate.params if getattr(p, "is_flag", False)]
    assert flags and all(p.metavar == "" for p in flags)


# -- progress -----------------------------------------------------------------------------------

def test_progress_draws_policies_done_and_simulated_time_only_when_shown() -> None:
    for show in (True, False):
        buf = io.StringIO()
        con = Console(file=buf, force_terminal=True, width=120)
        with SimProgress(["fifo", "las"], 10, con, show=show) as bar:
            bar.update("fifo", 10, 10, 7200.0)
            bar.update("las", 4, 10, 3600.0)
        text = buf.getvalue()
        if show:
            assert "policies done" in text and "1/2" in text and "2 h simulated" in text
        else:
            assert text == ""
        assert bar.finished == {"fifo"}


def test_show_progress_only_on_a_terminal_and_never_for_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for out_tty, err_tty, as_json, expected in [
        (True, True, False, True), (True, True, True, False),
        (False, True, False, False), (True, False, False, False),
    ]:
        monkeypatch.setattr(sys.stdout, "isatty", lambda v=out_tty: v)
        monkeypatch.setattr(sys.stderr, "isatty", lambda v=err_tty: v)
        assert show_progress(as_json) is expected


SMALL = ["simulate", "-t", "philly", "--limit", "20", "-c", "v100:16", "-p", "fifo",
         "--no-plots"]


@pytest.mark.parametrize("as_json", [False, True])
def test_simulate_progress_on_a_terminal_but_not_with_json(
    as_json: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    args = [*SMALL, "--out", str(tmp_path)] + (["--json"] if as_json else [])
    code, out, err = run_tessera(args, capsys, monkeypatch)
    assert code == 0, err
    if as_json:
        json.loads(out)
        assert "policies done" not in err and "━" not in err
    else:
        assert "policies done" in err and "simulated" in err


def test_simulate_piped_shows_no_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, _out, err = run_tessera([*SMALL, "--out", str(tmp_path)], capsys, monkeypatch)
    assert code == 0, err
    assert "policies done" not in err and "━" not in err


def test_python_dash_m_tessera_is_the_tessera_command() -> None:
    """A checkout without the console script on ``PATH``: ``python -m tessera`` answers as
    ``tessera`` does (the package has its ``__main__``)."""
    src = Path(__file__).resolve().parents[2] / "src"
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "COLUMNS": "100"}
    out = subprocess.run([sys.executable, "-m", "tessera", "policies"], capture_output=True,
                         text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "hetero_srpt" in out.stdout


def test_every_command_and_group_ends_its_help_with_an_example() -> None:
    """docs/cli.md promises an example in every command's ``--help``: groups included
    (``traces``, ``share``, ``lessons``, ``export``, ``admin``), the root excepted (it points
    at ``tessera demo``)."""
    root = typer.main.get_command(app)
    missing = [cmd.name for cmd in walk(root)
               if cmd is not root and "Example: tessera " not in (cmd.epilog or "")]
    assert not missing
