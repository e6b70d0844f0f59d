"""Side-by-side comparison of simulation results, as a rich table and as plain rows."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.table import Table

from tessera.sim.metrics import SimResult

#: (header, getter, format) for each column of the comparison table.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("avg JCT", "avg_jct_s", "dur"),
    ("p50 JCT", "p50_jct_s", "dur"),
    ("p99 JCT", "p99_jct_s", "dur"),
    ("avg queue", "avg_queue_delay_s", "dur"),
    ("makespan", "makespan_s", "dur"),
    ("util", "utilization", "pct"),
    ("FTF ρ p95", "ftf_rho_p95", "num"),
    ("preempt", "preemptions", "int"),
    ("done", "succeeded", "int"),
    ("wall", "wall_s", "sec"),
)


def human_duration(seconds: float) -> str:
    """``5400`` → ``1.5 h``; keeps three significant figures."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _fmt(value: object, kind: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    assert isinstance(value, int | float)
    if kind == "dur":
        return human_duration(float(value))
    if kind == "pct":
        return f"{100 * float(value):.1f} %"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "sec":
        return f"{float(value):.1f} s"
    return f"{float(value):.2f}"


def comparison_table(results: Sequence[SimResult], title: str = "") -> Table:
    """One row per policy; the best average JCT is marked, ratios are against it."""
    best = min((r.summary.avg_jct_s for r in results if math.isfinite(r.summary.avg_jct_s)),
               default=math.nan)
    table = Table(title=title or None, header_style="bold")
    table.add_column("policy")
    for header, _key, _kind in _COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("JCT ÷ best", justify="right")
    for r in results:
        d = r.as_dict()
        ratio = r.summary.avg_jct_s / best if best and math.isfinite(best) else math.nan
        name = r.policy + (" ★" if ratio == 1.0 else "")
        table.add_row(name, *(_fmt(d[k], kind) for _h, k, kind in _COLUMNS), f"{ratio:.2f}×")
    return table


#: (header, key, format) of the queueing-delay split (the Philly study's causes of waiting).
WAIT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("avg queue", "avg_queue_delay_s", "dur"),
    ("quota (fair-share)", "wait_quota_s_mean", "dur"),
    ("capacity", "wait_capacity_s_mean", "dur"),
    ("fragmentation", "wait_fragmentation_s_mean", "dur"),
    ("quota h", "wait_quota_h", "num"),
    ("capacity h", "wait_capacity_h", "num"),
    ("fragmentation h", "wait_fragmentation_h", "num"),
)


def wait_split_table(results: Sequence[SimResult], title: str = "") -> Table:
    """Why jobs waited: mean per job and total job-hours, by reason (quota, capacity,
    fragmentation). Waits after preemptions and failures count too, so the three can add up
    to more than the queueing delay (first start − submission)."""
    table = Table(title=title or "queueing delay by reason (mean per job; total job-hours)",
                  header_style="bold")
    table.add_column("policy")
    for header, _key, _kind in WAIT_COLUMNS:
        table.add_column(header, justify="right")
    for r in results:
        d = r.as_dict()
        table.add_row(r.policy, *(_fmt(d[k], kind) for _h, k, kind in WAIT_COLUMNS))
    return table
