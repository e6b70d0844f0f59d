"""PNG figures for a trace analysis (matplotlib, headless Agg backend).

Each ``_plot_*`` function draws one figure from an :class:`~.report.Analysis` (and, for the
duration CDF, quantiles of the trace's own column) and returns ``None`` when the trace has
nothing to show. :func:`render_plots` writes the applicable ones into a folder and returns
their paths, in reading order; :mod:`.html` embeds the same files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from tessera.analyze.trace import Clock, Trace

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tessera.analyze.report import Analysis

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def _bars(ax: plt.Axes, labels: list[str], series: dict[str, list[float]]) -> None:
    """Grouped bars: one group per label, one bar per series."""
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ax.bar(xs, values, width=width, label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.legend()


def _plot_sizes(a: Analysis, t: Trace) -> Figure | None:
    if a.jobs is None or not a.jobs.size_buckets:
        return None
    rows = a.jobs.size_buckets
    fig, ax = plt.subplots(figsize=(7, 4))
    series = {"share of jobs": [r.jobs_pct for r in rows]}
    if all(r.gpu_time_pct is not None for r in rows):
        series["share of GPU-time"] = [r.gpu_time_pct or 0.0 for r in rows]
    _bars(ax, [r.label for r in rows], series)
    ax.set(xlabel="GPUs requested", ylabel="%", title=f"{a.trace_name}: job size")
    return fig


def _plot_durations(a: Analysis, t: Trace) -> Figure | None:
    if t.jobs is None or "duration_s" not in t.jobs.columns:
        return None
    qs = np.linspace(0.0, 1.0, 201)
    values = np.quantile(t.jobs["duration_s"].drop_nulls().to_numpy(), qs)  # one sort
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.maximum(values, 1.0), 100 * qs)
    ax.set_xscale("log")
    ax.set(xlabel="duration (s, log)", ylabel="% of jobs ≤ x")
    ax.set_title(f"{a.trace_name}: duration CDF")
    for secs, label in ((60, "1 min"), (3600, "1 h"), (86400, "1 day")):
        ax.axvline(secs, color="grey", lw=0.5, ls=":")
        ax.text(secs, 2, label, fontsize=8, color="grey")
    ax.grid(alpha=0.3)
    return fig


def _plot_diurnal(a: Analysis, t: Trace) -> Figure | None:
    arr = a.jobs.arrivals if a.jobs else None
    if arr is None:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1.3]})
    relative = arr.clock is not Clock.WALL
    if arr.by_hour_per_tenant:
        bottom = [0] * 24
        for name, counts in arr.by_hour_per_tenant.items():
            ax1.bar(range(24), counts, bottom=bottom, label=name)
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        ax1.legend(fontsize=7, ncol=2)
    else:
        ax1.bar(range(24), arr.by_hour)
    ax1.set(
        xlabel="hour since trace start (mod 24)" if relative else "hour of day (local)",
        ylabel="jobs submitted",
        title=f"{a.trace_name}: arrivals by hour",
    )
    ax2.bar(range(7), arr.by_weekday)
    ax2.set_xticks(range(7), [f"d{i}" for i in range(7)] if relative else list(WEEKDAYS))
    ax2.set(title="by day of week" + (" (relative)" if relative else ""))
    fig.tight_layout()
    return fig


def _plot_daily(a: Analysis, t: Trace) -> Figure | None:
    arr = a.jobs.arrivals if a.jobs else None
    if arr is None or len(arr.per_day) < 2:
        return None
    fig, ax = plt.subplots(figsize=(11, 4))
    days = range(len(arr.per_day))
    if arr.per_day_per_tenant:
        ax.stackplot(days, *arr.per_day_per_tenant.values(), labels=list(arr.per_day_per_tenant))
        ax.legend(fontsize=7, ncol=3, loc="upper left")
    else:
        ax.plot(days, arr.per_day)
    start = f"day 0 = {arr.first_day}" if arr.first_day else "day 0 = first submission"
    ax.set(xlabel=f"day ({start})", ylabel="jobs submitted", title=f"{a.trace_name}: per day")
    return fig


def _plot_occupancy(a: Analysis, t: Trace) -> Figure | None:
    if a.occupancy is None:
        return None
    dates = [d for d, _, _ in a.occupancy.daily]
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.plot(range(len(dates)), [x for _, x, _ in a.occupancy.daily], label="active nodes")
    ax.plot(range(len(dates)), [x for _, _, x in a.occupancy.daily], label="total nodes")
    step = max(1, len(dates) // 10)
    ax.set_xticks(range(0, len(dates), step), dates[::step], rotation=30, fontsize=8)
    ax.set(ylabel="nodes (daily mean)", title=f"{a.trace_name}: cluster occupancy")
    ax.legend()
    fig.tight_layout()
    return fig


def _plot_inventory(a: Analysis, t: Trace) -> Figure | None:
    if a.inventory is None:
        return None
    rows = [r for r in a.inventory.by_type if r.gpus > 0]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([r.gpu_type for r in rows], [r.gpus for r in rows])
    ax.set(ylabel="GPUs", title=f"{a.trace_name}: GPU inventory ({a.inventory.gpus:,} GPUs)")
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    return fig


def _plot_sharing(a: Analysis, t: Trace) -> Figure | None:
    if a.sharing is None:
        return None
    labels = list(a.sharing.tasks_pct)
    fig, ax = plt.subplots(figsize=(7, 4))
    _bars(ax, labels, {
        "share of tasks": [a.sharing.tasks_pct[k] for k in labels],
        "share of GPU requests": [a.sharing.gpu_requests_pct[k] for k in labels],
    })
    ax.set(xlabel="GPU request per task", ylabel="%", title=f"{a.trace_name}: task mix")
    return fig


def _plot_capacity(a: Analysis, t: Trace) -> Figure | None:
    if t.capacity is None:
        return None
    daily = t.capacity.group_by("cluster", "date").agg(pl.col("gpus").sum()).sort("date")
    fig, ax = plt.subplots(figsize=(9, 4))
    for (name,), part in daily.partition_by("cluster", as_dict=True).items():
        ax.plot(part["date"].to_list(), part["gpus"].to_list(), label=str(name))
    ax.set(ylabel="GPUs (sum over VCs)", title=f"{a.trace_name}: daily VC capacity")
    ax.legend()
    fig.autofmt_xdate()
    return fig


PLOTS: tuple[tuple[str, Callable[[Analysis, Trace], Figure | None]], ...] = (
    ("sizes", _plot_sizes),
    ("durations", _plot_durations),
    ("arrivals_diurnal_weekly", _plot_diurnal),
    ("arrivals_per_day", _plot_daily),
    ("occupancy", _plot_occupancy),
    ("inventory", _plot_inventory),
    ("task_mix", _plot_sharing),
    ("capacity", _plot_capacity),
)
"""(file stem, drawing function) in the order the report shows them."""


def render_plots(analysis: Analysis, trace: Trace, out_dir: Path) -> tuple[Path, ...]:
    """Write every applicable figure as ``<out_dir>/<stem>.png``; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, draw in PLOTS:
        fig = draw(analysis, trace)
        if fig is None:
            continue
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return tuple(written)
