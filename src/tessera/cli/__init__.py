"""The ``tessera`` command line.

Each area of Tessera keeps its commands in its own module here (``simulate``, ``plan``,
``share`` ...), exposing ``register(app)``; this module only assembles them, so
``tessera --help`` stays fast (heavy imports happen inside the commands).
"""

from __future__ import annotations

import importlib
import sys

import typer
import typer.main

from tessera import __version__
from tessera.errors import TesseraError

app = typer.Typer(
    name="tessera",
    help=(
        "Tessera runs deep-learning work on shared clusters of mixed GPUs: a multi-tenant "
        "scheduler, a per-job heterogeneous planner, MIG/MPS sharing for inference, and a "
        "trace-driven simulator that runs the same decision code.\n\n"
        "Start with `tessera demo`, then `tessera simulate --help`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules under tessera.cli that contribute commands, in the order they appear in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "simulate", "analyze", "plan", "train", "share", "serve", "live", "admin", "logs", "lessons",
    "speeds", "zeus", "service",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tessera {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Tessera: scheduling, planning, sharing and simulation for mixed-GPU clusters."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"tessera.cli.{_name}").register(app)


def main() -> None:
    """Entry point: run the CLI, printing user errors as one line (exit status 2)."""
    from tessera.cli.help_text import tidy_help

    try:
        command = tidy_help(typer.main.get_command(app), plain=not sys.stdout.isatty())
        rc = command.main(prog_name="tessera", standalone_mode=False)  # returns an Exit's code
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except TesseraError as e:
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as e:  # usage errors (click's, vendored by typer) arrive here
        show = getattr(e, "show", None)
        code = getattr(e, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
