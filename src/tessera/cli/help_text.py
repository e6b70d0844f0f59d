"""``--help`` that reads well on a terminal and in a file.

typer draws help as rich panels. That suits a terminal, but piped to a file rich assumes 80
columns and *cuts* what does not fit (``--fill-between-roun…``); every flag shows a ``<bool>``
placeholder though it takes no value; and a docstring's hard line breaks survive into the
output as ragged lines. :func:`tidy_help` fixes all three on the click tree that typer builds,
once per run, before click parses anything:

* every command's and option's help is re-flowed: the lines of a paragraph are joined (lists
  and indented blocks keep their lines), so the renderer wraps it at its own width;
* flags (and ``--help``) get an empty placeholder instead of ``<bool>``;
* a group lists each command with the whole first paragraph of its help (click would cut it
  to fit one line, ending in ``...``);
* when stdout is not a terminal, the help is click's plain text instead of rich panels: it
  wraps long names and texts, never cuts them, and has no box drawing to clutter a file;
* on a terminal, options are drawn in two columns whose names are never cut, even at 80
  columns (:mod:`tessera.cli.rich_help`).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

from tessera.cli.rich_help import install as install_rich_help

_LIST_ITEM = re.compile(r"\s*([*-]|\d+[.)])\s")
_BLOCK = re.compile(r"\s{4,}\S")


def reflow(text: str) -> str:
    """``text`` (a docstring or help) with each paragraph's lines joined into one line.

    Paragraphs are separated by blank lines. A line that starts a list item (``* ``, ``- ``,
    ``1. ``) or an indented block starts a new line; click's ``\\b`` marker (keep this paragraph
    as written) is honoured.
    """
    paragraphs = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b"):
            paragraphs.append(para)
            continue
        lines: list[str] = []
        for line in para.splitlines():
            if lines and not _LIST_ITEM.match(line) and not _BLOCK.match(line):
                lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def walk(command: Any) -> Iterator[Any]:
    """``command`` and every command below it (typer vendors click: no ``isinstance``)."""
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from walk(sub)


def tidy_help(root: Any, plain: bool) -> Any:
    """Re-flow the help of ``root``'s tree, blank the flags' placeholder and, with ``plain``,
    switch every command to click's plain help. Returns ``root``."""
    from typer._click import Context

    if not plain:
        install_rich_help()
    for cmd in walk(root):
        if cmd.help:
            cmd.help = reflow(cmd.help)
            if not cmd.short_help:  # the first paragraph, whole: click would cut it at "..."
                cmd.short_help = cmd.help.split("\n\n", 1)[0].partition("\f")[0]
        if plain and hasattr(cmd, "rich_markup_mode"):
            cmd.rich_markup_mode = None
        help_option = cmd.get_help_option(Context(cmd))
        for param in [*cmd.params, *([help_option] if help_option is not None else [])]:
            if getattr(param, "help", None):
                param.help = reflow(param.help)
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
    return root
