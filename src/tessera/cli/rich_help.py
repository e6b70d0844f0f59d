"""Terminal ``--help`` whose option names are never cut, at 80 columns or wider.

typer draws a command's options as a rich table of six columns (required mark, long name, short
name, negative long and short names, type, help). On an 80-column terminal they do not fit, and
rich's table shrinks every column alike: option names came out cut (``--gpus-per-ser…``) and the
help squeezed into a 13-character column, with defaults cut too. :func:`install` replaces the
one typer function that draws an options panel with :func:`print_options_panel`, which draws two
columns:

* the **name** column, never wrapped or cut (rich does not shrink a ``no_wrap`` column): ``*``
  for a required option, the names (``-t, --trace``) and the value placeholder on one line, a
  negative form (``--no-x``) on the next;
* the **help** column takes the rest of the width: help, env var, default, required and a
  number's range (``[x>=1]``) as one text that wraps at spaces and folds a word longer than the
  column (a long default) instead of ending it in ``…``.

Everything else typer draws (usage, description, command lists, panels, epilog) is typer's own.
The replaced function is private to typer, so ``tests/cli/test_terminal_help.py`` renders every
command's help on an 80-column terminal and fails if a name is cut or a line is too long.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer import rich_utils

_REQUIRED_MARK = "* "


def _name_cell(param: Any, ctx: Any) -> Text:
    """``* -t, --trace <str>`` (and a negative form on a second line) as one unwrapped cell."""
    is_argument = param.param_type_name == "argument"
    display_name = getattr(param, "display_name_raw", None) if is_argument else None
    names = [display_name] if display_name else sorted(param.opts, key=len)
    line = Text(_REQUIRED_MARK if param.required else "  ", style=rich_utils.STYLE_REQUIRED_SHORT)
    line.append(", ".join(names), style=rich_utils.STYLE_OPTION)
    placeholder = param.display_type_rich(ctx=ctx)
    if placeholder:
        line.append(f" {placeholder}", style=rich_utils.STYLE_TYPES)
    if param.secondary_opts:
        line.append("\n  " + ", ".join(param.secondary_opts),
                    style=rich_utils.STYLE_NEGATIVE_OPTION)
    return line


def _help_cell(param: Any, ctx: Any, markup_mode: Any) -> RenderableType:
    """typer's help for ``param`` (text, env var, default, required) as one flowing text.

    typer returns the pieces as rich ``Columns``, a grid whose cells end a word longer than the
    cell in ``…``: a long default (``fifo,las,max_min_fairness,…``) came out cut. Joined into
    one text, the pieces wrap with the column, and such a word folds onto the next line.
    """
    pieces = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
    parts = list(getattr(pieces, "renderables", ()))
    if not parts or not all(isinstance(part, Text) for part in parts):
        return pieces  # markdown help: typer's own layout
    range_text = param._get_number_range_help_str()
    if range_text:  # here, not after the placeholder: it would widen the name column
        parts.append(Text(f"[{range_text}]", style=rich_utils.STYLE_TYPES))
    return Text(" ").join(parts)


def print_options_panel(*, name: str, params: list[Any], ctx: Any, markup_mode: Any,
                        console: Any, **_: Any) -> None:
    """Draw one panel of options or arguments (typer's ``_print_options_panel``, two columns).

    Args:
        name: the panel's title (``Options``, ``Arguments`` or a ``rich_help_panel``).
        params: the panel's options or arguments, in order.
        ctx: the click context of the command whose help is drawn.
        markup_mode: typer's markup mode for help texts (``rich`` or ``markdown``).
        console: the rich console typer prints the help on.
    """
    if not params:
        return
    table = Table(show_header=False, box=None, expand=True, padding=(0, 1), pad_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1, overflow="fold")
    for param in params:
        table.add_row(_name_cell(param, ctx), _help_cell(param, ctx, markup_mode))
    console.print(Panel(table, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=name,
                        title_align=rich_utils.ALIGN_OPTIONS_PANEL))


def install() -> None:
    """Make typer draw options panels with :func:`print_options_panel` (idempotent)."""
    rich_utils._print_options_panel = print_options_panel
