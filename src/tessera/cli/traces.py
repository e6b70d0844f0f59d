"""``tessera traces``: the trace names every command accepts, and ``traces generate``.

``tessera traces`` lists the shared registry (:mod:`tessera.workload.known`): each name, which
commands take it, whether its data is bundled, found (and where) or missing, and the folders
searched for public data. ``tessera traces generate`` writes a synthetic Gavel-format trace
(:func:`tessera.workload.generate_gavel_like`), so a Gavel-style experiment needs no download.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tessera.cli.options import JSON, SEED

traces_app = typer.Typer(
    help="Trace names shared by simulate, lessons and analyze; generate Gavel-style traces.",
    epilog="Example: tessera traces (the names and where their data is)",
    invoke_without_command=True,
)


@traces_app.callback()
def list_traces(
    ctx: typer.Context,
    expand: bool = typer.Option(False, "--all", help="One row per name (numbered families "
                                "such as itp-cluster01..10 are one row by default)."),
    as_json: bool = JSON,
) -> None:
    """List trace names, the commands that take them, and where their data is.

    Bundled traces always work; the others are public data, looked for in $TESSERA_DATA_DIR
    when it is set, else in shared/data beside the checkout, ./shared/data and ../shared/data.

    Example: tessera traces --all --json (and see `tessera traces generate --help`).
    """
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from tessera.workload import list_known_traces
    from tessera.workload.datadir import DATA_DIR_ENV, DOCS_HINT, search_description

    if as_json:
        typer.echo(json.dumps([
            {"name": k.label, "rows": k.num_rows, "data": k.status, "file": k.trace.path,
             "simulate": k.trace.reader is not None, "description": k.trace.description}
            for k in list_known_traces(expand=expand)], indent=2))
        return
    t = Table("name", "rows", "data", "file", "for", "description", header_style="bold")
    status = {"bundled": "[green]bundled[/]", "found": "found", "missing": "[yellow]missing[/]"}
    for k in list_known_traces(expand=expand):
        t.add_row(k.label, f"{k.num_rows:,}" if k.num_rows is not None else "–",
                  status[k.status], k.trace.path,
                  "all" if k.trace.reader is not None else "analyze only", k.trace.description)
    con = Console()
    if not con.is_terminal:
        con = Console(width=160)
    con.print(t)
    con.print("for: all = simulate, lessons and analyze. Bundled files are under tessera/data; "
              f"public data is looked for in "
              f"{search_description()}, the first folder holding the file wins. Set "
              f"{DATA_DIR_ENV} to the folder that holds traces/ ({DOCS_HINT}).")


@traces_app.command("generate", epilog="Example: tessera traces generate --out my_gavel.trace "
                    "--jobs 200 --jobs-per-hour 20 --seed 0")
def generate(
    out: Path = typer.Option(..., "--out", help="File to write: a Gavel 10-column TSV "
                             "(conventionally *.trace).", dir_okay=False),
    jobs: int = typer.Option(100, "--jobs", min=1, help="Number of jobs."),
    jobs_per_hour: float = typer.Option(20.0, "--jobs-per-hour", help="Mean arrival rate: "
                                        "Poisson arrivals, first job at t = 0."),
    seed: int = SEED,
    multi_gpu: bool | None = typer.Option(None, "--multi-gpu/--single-gpu", help="Gang sizes "
                                          "1/2/4/8 GPUs (70/10/15/5 %), or 1 GPU for every "
                                          "job. Default: multi-GPU for gavel, single-GPU for "
                                          "synergy (each simulator's default)."),
    multi_priority: bool = typer.Option(False, "--multi-priority", help="Give 20 % of jobs "
                                        "priority weight 5."),
    style: str = typer.Option("gavel", "--style", help="gavel (Gavel's generator, a TSV) or "
                              "synergy (Synergy's Philly-derived workload with CPU/memory "
                              "profiles, a CSV; single-GPU unless --multi-gpu is given)."),
    split: str = typer.Option("20,70,10", "--split", help="synergy: percent of image, "
                              "language and speech jobs."),
) -> None:
    """Write a synthetic trace drawn the way Gavel's simulator draws jobs (docs/workloads.md),
    or, with --style synergy, the way Synergy's simulator draws its workload.

    Gavel style: job types and speeds come from Gavel's K80/P100/V100 profiles: Gavel can
    replay it too. Synergy style: each job names a Synergy model whose CPU/memory profile it
    trains with (docs/scheduler.md).
    """
    from tessera.workload import generate_gavel_like, write_gavel_tsv

    if not jobs_per_hour > 0:
        raise typer.BadParameter(f"must be > 0, got {jobs_per_hour:g}",
                                 param_hint="--jobs-per-hour")
    if not out.parent.is_dir():
        raise typer.BadParameter(f"folder {out.parent} does not exist", param_hint="--out")
    if style not in ("gavel", "synergy"):
        raise typer.BadParameter(f"choose gavel or synergy, got {style!r}", param_hint="--style")
    if style == "synergy":
        _generate_synergy(out, jobs, jobs_per_hour, seed, split, bool(multi_gpu))
        return
    workload = generate_gavel_like(jobs, jobs_per_hour, seed, multi_gpu=multi_gpu is not False,
                                   multi_priority=multi_priority)
    write_gavel_tsv(workload, out)
    typer.echo(f"wrote {len(workload)} jobs to {out} ({workload.notes[0]})")
    typer.echo(f"replay it: tessera simulate -t {out} --compat gavel")


def _generate_synergy(out: Path, jobs: int, jobs_per_hour: float, seed: int, split: str,
                      multi_gpu: bool) -> None:
    from tessera.errors import SpecError
    from tessera.workload.readers.synergy_csv import write_synergy_csv
    from tessera.workload.synergy import generate_synergy_like, parse_split

    try:
        workload = generate_synergy_like(jobs, jobs_per_hour, seed, parse_split(split),
                                         multi_gpu)
    except SpecError as e:
        raise typer.BadParameter(str(e), param_hint="--split") from None
    write_synergy_csv(workload, out)
    typer.echo(f"wrote {len(workload)} jobs to {out} ({workload.notes[0]})")
    typer.echo(f"simulate it: tessera simulate -t {out} -c synergy-128 "
               "-p fifo:resources=proportional,fifo:resources=tune")


def register(app: typer.Typer) -> None:
    """Add ``tessera traces`` (list, generate) to the CLI."""
    app.add_typer(traces_app, name="traces", rich_help_panel="Simulation")
