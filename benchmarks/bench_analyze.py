"""Wall time of ``tessera analyze`` stages on the two large job traces (Philly, ITP).

Prints one table: load (CSV → typed polars frames), analyse (all statistics + comparison),
plots (PNG files), html (embedding) and the total, best of ``--repeat`` runs, plus each
trace's jobs per second. Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_analyze.py [--repeat 3]

Needs ../shared/data (or $TESSERA_DATA_DIR). The machines are shared and noisy: compare the rows
of one run with each other rather than with a fixed threshold.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tessera.analyze.formats import load_trace
from tessera.analyze.html import write_html
from tessera.analyze.plots import render_plots
from tessera.analyze.report import analyze_trace

TRACES = ("philly-full", "itp")


def _time_once(name: str, out: Path) -> tuple[int, dict[str, float]]:
    t0 = time.perf_counter()
    trace = load_trace(name)
    t1 = time.perf_counter()
    analysis = analyze_trace(trace)
    t2 = time.perf_counter()
    images = render_plots(analysis, trace, out)
    t3 = time.perf_counter()
    write_html(analysis, images, out / "report.html")
    t4 = time.perf_counter()
    jobs = trace.jobs.height if trace.jobs is not None else 0
    return jobs, {"load": t1 - t0, "analyse": t2 - t1, "plots": t3 - t2, "html": t4 - t3,
                  "total": t4 - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per trace; best is shown")
    args = parser.parse_args()
    table = Table(title=f"tessera analyze: wall time (s), best of {args.repeat}")
    for column in ("trace", "jobs", "load", "analyse", "plots", "html", "total", "jobs/s"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        for name in TRACES:
            runs = [_time_once(name, Path(tmp) / f"{name}-{i}") for i in range(args.repeat)]
            jobs = runs[0][0]
            best = {k: min(r[1][k] for r in runs) for k in runs[0][1]}
            table.add_row(name, f"{jobs:,}", *(f"{best[k]:.3f}" for k in
                          ("load", "analyse", "plots", "html", "total")),
                          f"{jobs / best['total']:,.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
