"""``--help`` on a real 80-column terminal: option names whole, no line wider than the terminal.

Piped help is click's plain text (``tests/cli/test_first_hour_cli.py``); on a terminal typer
draws rich panels, and its six-column option table cut names at 80 columns
(``--fill-between-roun…``, ``--gpus-per-ser…``). Each command's help is rendered here the way
``tessera CMD --help`` renders it on a terminal — the tree tidied as :func:`tessera.cli.main`
tidies it, typer's own console forced to a terminal of ``COLUMNS=80`` — and every visible option
name and negative form must appear whole, with nothing cut to ``…``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer import rich_utils

from tessera.cli import app
from tessera.cli.help_text import tidy_help

WIDTH = 80


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _walk(sub, (*path, name))


ROOT = tidy_help(typer.main.get_command(app), plain=False)
COMMANDS = list(_walk(ROOT))


def _ellipses_written(cmd: Any) -> int:
    """How many ``…`` the command's own texts hold (``j-…`` in a job id's help is no cut)."""
    texts = [cmd.help, cmd.epilog, *(p.help for p in cmd.params if hasattr(p, "help")),
             *(sub.short_help for sub in getattr(cmd, "commands", {}).values())]
    return sum((text or "").count("…") for text in texts)


@pytest.fixture
def terminal_80(monkeypatch: pytest.MonkeyPatch) -> None:
    """typer's console as on an 80-column terminal: forced terminal, no colours to strip."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setattr(rich_utils, "FORCE_TERMINAL", True)
    monkeypatch.setattr(rich_utils, "COLOR_SYSTEM", None)


def _render(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    ROOT.main([*path, "--help"], prog_name="tessera", standalone_mode=False)
    return capsys.readouterr().out


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) or "tessera"
                                                        for p, _ in COMMANDS])
@pytest.mark.usefixtures("terminal_80")
def test_terminal_help_is_whole_at_80_columns(path: tuple[str, ...], cmd: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = _render(path, capsys)
    assert "╭" in out, "not the terminal's rich help"
    lines = out.splitlines()
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, f"lines wider than {WIDTH}: {wide[:2]}"
    cut = [line for line in lines if "…" in line]
    assert len(cut) <= _ellipses_written(cmd), f"cut: {cut}"
    tokens = set(out.replace(",", " ").split())
    for param in cmd.params:
        if getattr(param, "hidden", False) or param.param_type_name != "option":
            continue
        for name in (*param.opts, *param.secondary_opts):
            assert name in tokens, f"{' '.join(path)}: {name} is not shown whole"
