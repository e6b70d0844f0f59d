"""``tessera analyze TRACE``: characterise a cluster trace and check it against the papers.

Writes ``summary.json``, PNG figures and a self-contained ``report.html`` under ``--out``
(default ``runs/analyze-<trace>-<timestamp>/``) and prints rich tables, or with ``--json`` the
JSON summary on stdout. Heavy imports (polars, matplotlib) happen inside the command so
``tessera --help`` stays fast.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from tessera.cli.options import JSON, RUN_OUT


def register(app: typer.Typer) -> None:
    """Add the ``analyze`` command to ``app``."""
    app.command("analyze", epilog="Example: tessera analyze philly --out runs/philly")(analyze)


def analyze(
    trace: str = typer.Argument(
        ...,
        help="A trace file or folder, or a trace name: the same names as `simulate -t` "
        "(`tessera traces` lists them and where their data is; philly, sia-philly-1 and "
        "pai-2020 are bundled, philly-full, itp, fgd, helios ... need the public data).",
    ),
    format: str | None = typer.Option(
        None, "--format", help="Skip detection: philly, philly-slice, itp, fgd, pai-2020, "
        "helios, sia, gavel, ..."
    ),
    as_json: bool = JSON,
    out: Path | None = RUN_OUT,
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG figures."),
) -> None:
    """Characterise a GPU-cluster trace: sizes, durations, arrivals, tenants, inventory,
    occupancy; compare with the published figures; write plots and an HTML report.

    Example: tessera analyze philly  (the bundled week; philly-full is the whole table)
    """
    from tessera.analyze.formats import load_trace
    from tessera.analyze.html import write_html
    from tessera.analyze.plots import render_plots
    from tessera.analyze.report import analyze_trace, dumps
    from tessera.analyze.terminal import print_summary

    loaded = load_trace(trace, format)
    analysis = analyze_trace(loaded)
    out_dir = out or Path("runs") / f"analyze-{loaded.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    text = dumps(analysis)
    (out_dir / "summary.json").write_text(text, encoding="utf-8")
    images = render_plots(analysis, loaded, out_dir) if plots else ()
    report = write_html(analysis, images, out_dir / "report.html")
    if as_json:
        typer.echo(text)
    else:
        print_summary(analysis)
        typer.echo(f"report: {report}  ({len(images)} figures in {out_dir})")
