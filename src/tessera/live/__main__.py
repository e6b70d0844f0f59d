"""``python -m tessera.live ...``: the live commands without the main ``tessera`` CLI."""

from __future__ import annotations

import typer

from tessera.cli.live import register

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)
register(app)

if __name__ == "__main__":
    app()
