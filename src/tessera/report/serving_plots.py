"""SLO attainment over time of a trace replay (``tessera share simulate --trace``), as a PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tessera.report.plots import _plt
from tessera.share.traces import Replay


def attainment_plot(rep: Replay, path: Path, title: str = "") -> Path:
    """One line per service: the fraction of its requests within the SLO in each window."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.array([w.start_h for w in rep.windows]) / 24.0
    for name in rep.slo_ms:
        y = np.array([w.attainment[name] for w in rep.windows]) * 100.0
        ax.plot(x, y, lw=1, label=f"{name} ({rep.attainment[name] * 100:.2f} %)")
    ax.axhline(99.0, color="grey", ls="--", lw=1)
    ax.set_xlabel(f"trace time (days; {rep.window_h:g} h windows)")
    ax.set_ylabel("requests within SLO (%)")
    ax.set_title(title or f"SLO attainment over time: {Path(rep.trace).name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
