"""The estimate's error over time (``--speeds learned``): a plot for ``report.html``.

Each result's ``estimate_error`` (:mod:`tessera.sim.estimate_error`) holds, per round, the mean
and 90th percentile over the active jobs of how far the policies' speed estimates were from the
truth. :func:`plot_estimate_error` draws both as step lines per policy, on the same time axis
as the utilization and power plots; the CSV beside it (``estimate-error-<policy>.csv``,
:func:`tessera.report.files.write_estimate_error_csv`) holds the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tessera.report.plots import _plt, finish_time_plot, first_submission_s
from tessera.sim.metrics import SimResult

__all__ = ["CAPTION", "plot_estimate_error"]

CAPTION = ("Learned speeds: how far the policies' speed estimates were from the truth, per "
           "round, over the active jobs (mean |estimate / true − 1| over each job's flavors; "
           "solid: mean over jobs, dashed: 90th percentile).")


def plot_estimate_error(results: Sequence[SimResult], path: Path) -> Path | None:
    """Estimate error (%) over time, mean and p90 per policy; ``None`` (no file) when no
    result learned its speeds."""
    learned = [r for r in results if r.estimate_error]
    if not learned:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    start = first_submission_s(results)
    for r in learned:
        t = (np.array([p.time_s for p in r.estimate_error]) - start) / 3600.0
        mean = [100 * p.mean_error for p in r.estimate_error]
        p90 = [100 * p.p90_error for p in r.estimate_error]
        (line,) = ax.step(t, mean, where="post", label=f"{r.policy} mean", lw=1)
        ax.step(t, p90, where="post", label=f"{r.policy} p90", lw=1, ls="--",
                color=line.get_color())
    ax.set_ylabel("estimate error (%)")
    ax.set_title("Speed estimates' error over time")
    ax.set_ylim(bottom=0)
    return finish_time_plot(fig, ax, results, path)
