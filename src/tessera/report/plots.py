"""PNG plots of simulation results (matplotlib, headless Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tessera.sim.metrics import SimResult


def _plt() -> Any:
    import matplotlib  # lazy: with pyplot +0.28 s, only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as matplotlib above

    return plt


def _cdf_plot(
    series: Sequence[tuple[str, np.ndarray]], path: Path, xlabel: str, title: str,
    marker_x: float | None = None,
) -> Path:
    """One CDF line per (label, values), log-scaled x axis, written to ``path``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, values in series:
        v = np.sort(values)
        if len(v):
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=label)
    if marker_x is not None:
        ax.axvline(marker_x, color="grey", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_jct_cdf(results: Sequence[SimResult], path: Path) -> Path:
    """CDF of job completion time per policy, log-scaled time axis."""
    series = [(r.policy, np.array([j.jct_s for j in r.jobs if j.jct_s is not None]) / 3600.0)
              for r in results]
    return _cdf_plot(series, path, "job completion time (hours, log scale)", "JCT distribution")


def first_submission_s(results: Sequence[SimResult]) -> float:
    """The earliest submission of any job in ``results`` (time 0 of the time axes)."""
    return min((j.submit_s for r in results for j in r.jobs), default=0.0)


def time_axis_limit_h(results: Sequence[SimResult]) -> float:
    """Where the time axis ends: hours from the first submission to the last moment any
    policy had a job running or waiting -- the last job's end, or a later sample that still
    shows work (a run stopped at its horizon with jobs left).

    The samples alone would run further: a run's clock also passes the predicted completions
    of runs that were stopped before them (preempted or moved gangs), and the idle samples it
    takes on the way can reach far past the last finish (the Philly demo: ~1,980 h of samples
    for a last finish at 706 h).
    """
    start = first_submission_s(results)
    ends = [j.finish_s for r in results for j in r.jobs if j.finish_s is not None]
    ends += [s.time_s for r in results for s in r.samples if s.busy_gpus or s.queued_jobs]
    return max((e - start for e in ends), default=0.0) / 3600.0


def finish_time_plot(fig: Any, ax: Any, results: Sequence[SimResult], path: Path,
                     legend_ax: Any = None) -> Path:
    """Finish a plot whose x axis is hours since the first submission: the axis label, its
    end (:func:`time_axis_limit_h`), a grid and a legend (on ``legend_ax``, else ``ax``);
    then write it to ``path`` and close the figure. Every over-time plot ends this way."""
    ax.set_xlabel("time since first submission (hours)")
    limit = time_axis_limit_h(results)
    if limit > 0:
        ax.set_xlim(0, limit)
    ax.grid(alpha=0.3)
    (legend_ax or ax).legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def plot_timeseries(results: Sequence[SimResult], total_gpus: int, path: Path) -> Path:
    """GPU utilization and queue length over time, one line per policy, from the first
    submission to the last job's end (:func:`time_axis_limit_h`)."""
    plt = _plt()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.4), sharex=True)
    start = first_submission_s(results)
    for r in results:
        if not r.samples:
            continue
        t = (np.array([s.time_s for s in r.samples]) - start) / 3600.0
        busy = np.array([s.busy_gpus for s in r.samples]) / max(total_gpus, 1)
        queued = np.array([s.queued_jobs for s in r.samples])
        top.plot(t, 100 * busy, label=r.policy, lw=1)
        bottom.plot(t, queued, label=r.policy, lw=1)
    top.set_ylabel("GPUs busy (%)")
    top.set_title("Utilization and queue over time")
    top.grid(alpha=0.3)
    bottom.set_ylabel("jobs waiting")
    return finish_time_plot(fig, bottom, results, path, legend_ax=top)


def plot_rho(results: Sequence[SimResult], path: Path) -> Path:
    """CDF of finish-time-fairness ρ per policy (ρ ≤ 1: no worse than a fair share)."""
    series = [(r.policy, np.array([j.ftf_rho for j in r.jobs if j.ftf_rho is not None]))
              for r in results]
    return _cdf_plot(series, path, "finish-time fairness ρ (log scale)",
                     "Finish-time fairness", marker_x=1.0)
