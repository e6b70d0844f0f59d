"""Rich tables for the terminal summary of a trace analysis.

:func:`tables` turns an :class:`~.report.Analysis` into a list of ``rich`` tables (overview,
sizes, durations, tenants, status, FGD mix, inventory, occupancy, Helios, published vs
measured); :func:`print_summary` prints them. Numbers are formatted once, by :func:`fmt`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from tessera.analyze.published import Outcome

if TYPE_CHECKING:
    from tessera.analyze.report import Analysis

OUTCOME_STYLE = {
    Outcome.REPRODUCED: "green",
    Outcome.DIFFERS: "yellow",
    Outcome.NOT_REPRODUCIBLE: "dim",
}


def fmt(value: float | int | None, digits: int = 4) -> str:
    """Thousands separators, ``digits`` significant digits for fractions, ``–`` for None."""
    if value is None:
        return "–"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.1f}"
    return f"{value:.{digits}g}"


def _table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    return t


def tables(a: Analysis) -> list[Table]:
    """Every table that applies to this analysis, in reading order."""
    out: list[Table] = []
    j = a.jobs
    if j is not None:
        t = _table(f"{a.trace_name} ({a.trace_format}): jobs", "quantity", "value")
        t.add_row("jobs", fmt(j.job_count))
        t.add_row("span (days)", fmt(j.span_days))
        t.add_row("mean GPUs per job", fmt(j.mean_gpus))
        t.add_row("GPU-hours", fmt(j.gpu_hours))
        out.append(t)
        if j.sizes:
            t = _table("job size", "GPUs", "jobs", "% jobs", "GPU-h", "% GPU-time")
            for r in j.sizes:
                t.add_row(r.label, fmt(r.jobs), fmt(r.jobs_pct), fmt(r.gpu_hours),
                          fmt(r.gpu_time_pct))
            out.append(t)
        dists = [(n, d) for n, d in (("duration", j.duration), ("wait", j.wait)) if d]
        if dists:
            t = _table("durations (s)", "", "mean", "p50", "p90", "p99", "max", "> 1 day %")
            for name, d in dists:
                t.add_row(name, fmt(d.mean_s), fmt(d.p50_s), fmt(d.p90_s), fmt(d.p99_s),
                          fmt(d.max_s), fmt(d.over_1_day_pct))
            out.append(t)
        for title, rows in (("tenants (VC / cluster)", j.tenants), ("status", j.status)):
            if rows:
                t = _table(title, "", "jobs", "% jobs", "GPU-h", "% GPU-time")
                for s in rows:
                    t.add_row(s.label, fmt(s.jobs), fmt(s.jobs_pct), fmt(s.gpu_hours),
                              fmt(s.gpu_time_pct))
                out.append(t)
    if a.sharing is not None:
        t = _table("GPU-sharing task mix (FGD Table 1)", "GPU request", "% tasks", "% GPU reqs")
        for k, v in a.sharing.tasks_pct.items():
            t.add_row(k, fmt(v), fmt(a.sharing.gpu_requests_pct[k]))
        t.add_row("type-constrained GPU tasks", fmt(a.sharing.constrained_gpu_tasks_pct), "")
        out.append(t)
    if a.inventory is not None:
        t = _table(f"GPU inventory: {a.inventory.gpus:,} GPUs on {a.inventory.nodes:,} machines",
                   "GPU type", "machines", "GPUs", "GPUs/machine")
        for inv in a.inventory.by_type:
            t.add_row(inv.gpu_type, fmt(inv.nodes), fmt(inv.gpus),
                      ",".join(map(str, inv.gpus_per_node)))
        out.append(t)
    if a.occupancy is not None:
        o = a.occupancy
        t = _table(f"occupancy {o.start} .. {o.end}", "nodes", "mean", "p50", "max")
        t.add_row("active", fmt(o.active_mean), fmt(o.active_p50), fmt(o.active_max))
        t.add_row("total", "", fmt(o.total_p50), fmt(o.total_max))
        t.add_row("active / total", fmt(o.ratio_mean), "", "")
        out.append(t)
    if a.helios is not None:
        h = a.helios
        t = _table(f"Helios re-aggregated over {', '.join(h.clusters)}", "quantity", "value")
        for k, v in h.metrics().items():
            t.add_row(k.removeprefix("helios."), fmt(v))
        out.append(t)
    if a.comparisons:
        t = _table("published vs measured (sources in report.html)", "figure", "published",
                   "measured", "verdict")
        for c in a.comparisons:
            f = c.figure
            t.add_row(f"{f.quantity} [{f.evidence.value}]", f"{fmt(f.value)} {f.unit}",
                      fmt(c.measured), f"[{OUTCOME_STYLE[c.outcome]}]{c.describe()}[/]")
        out.append(t)
    return out


def print_summary(a: Analysis, console: Console | None = None) -> None:
    """Print every table, then the trace's caveats."""
    console = console or Console()
    for t in tables(a):
        console.print(t)
        console.print()
    for note in a.notes:
        console.print(f"[dim]note: {note}[/]")
    counts = a.outcome_counts()
    console.print(
        f"published figures: {counts['reproduced']} reproduced, {counts['differs']} differ, "
        f"{counts['not reproducible']} not reproducible from stored data"
    )
