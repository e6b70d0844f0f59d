"""Side-by-side comparison of simulation results, as rich tables with a legend under each.

Every column says what it measures in :class:`Column.meaning`; the terminal tables print these
as their caption and the HTML report as its legend, so the two never drift apart. The exact
definitions live in :mod:`tessera.sim.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.table import Table

from tessera.report.policies import ORACLE_MARK, ORACLE_MEANING, policy_info, policy_infos
from tessera.sim.metrics import PENDING_NOT_RECORDED, SimResult

Kind = Literal["dur", "pct", "int", "sec", "num"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a comparison table: its header, the ``SimResult.as_dict`` key it shows,
    how the value is formatted (a duration, a percentage ...), and what it measures."""

    header: str
    key: str
    kind: Kind
    meaning: str


#: The comparison table, one row per policy.
COLUMNS: tuple[Column, ...] = (
    Column("avg JCT", "avg_jct_s", "dur",
           "mean job completion time (finish − submission), jobs that succeeded"),
    Column("p50 JCT", "p50_jct_s", "dur", "median JCT"),
    Column("p99 JCT", "p99_jct_s", "dur", "99th percentile of JCT"),
    Column("start wait", "avg_queue_delay_s", "dur",
           "mean wait before the first start (first start − submission), jobs that started; "
           "waits after preemptions are in the next table"),
    Column("makespan", "makespan_s", "dur", "last finish − first submission"),
    Column("util", "utilization", "pct",
           "GPU utilization: GPU-time held by jobs ÷ (GPUs × makespan)"),
    Column("FTF ρ p95", "ftf_rho_p95", "num",
           "95th percentile of finish-time fairness ρ = JCT ÷ ideal time (alone on its "
           "fastest flavor, or on a 1/N share of the cluster if that is smaller than its "
           "gang); 1 = as fast as alone, lower is fairer"),
    Column("preempt", "preemptions", "int",
           "preemptions, each charged a checkpoint and a restore"),
    Column("done", "succeeded", "int", "jobs that succeeded"),
    Column("wall", "wall_s", "sec", "real time the simulation of this policy took"),
)

#: Shown after ``preempt`` only when some policy resized elastic jobs (``sia``, ``pollux`` ...).
RESIZE_COLUMN = Column("resize", "resizes", "int",
                       "resizes of elastic jobs (GPU count or batch changed), each charged its "
                       "model's restart time")


def comparison_columns(results: Sequence[SimResult]) -> tuple[Column, ...]:
    """:data:`COLUMNS`, with :data:`RESIZE_COLUMN` after ``preempt`` when any of ``results``
    resized a job (rigid-only comparisons keep their usual shape)."""
    if not any(r.summary.resizes for r in results):
        return COLUMNS
    at = next(i for i, c in enumerate(COLUMNS) if c.key == "preemptions") + 1
    return (*COLUMNS[:at], RESIZE_COLUMN, *COLUMNS[at:])


#: Marks of the comparison table that are not columns of the metrics.
RATIO_HEADER = "JCT ÷ best"
BEST_MARK = "★"
MARKS: tuple[tuple[str, str], ...] = (
    (RATIO_HEADER, "avg JCT ÷ the lowest avg JCT among the policies compared"),
    (BEST_MARK, "the policy with the lowest avg JCT"),
)

#: Where the time pending went, one row per policy (means over all jobs).
WAIT_COLUMNS: tuple[Column, ...] = (
    Column("start wait", "avg_queue_delay_s", "dur",
           "mean first start − submission, jobs that started (as in the table above)"),
    Column("pending", "pending_s_mean", "dur",
           "mean time pending over all spells: before the first start and again after each "
           "preemption or failure; the next four columns add up to it"),
    Column("quota", "wait_quota_s_mean", "dur",
           "fair-share delay: the job's tenant queue is at its quota"),
    Column("capacity", "wait_capacity_s_mean", "dur",
           "not enough free GPUs of an allowed flavor: other jobs hold them"),
    Column("fragmentation", "wait_fragmentation_s_mean", "dur",
           "enough GPUs are free, but not on one server as the gang needs"),
    Column("awaiting decision", "wait_decision_s_mean", "dur",
           "pending before the scheduler's next decision looked at the job: in rounds mode, "
           "a job that arrives (or retries after a failure) between rounds waits for the next "
           "round"),
    Column("pending job-h", "pending_h", "num", "total job-hours pending (mean × jobs)"),
)


def human_duration(seconds: float | None) -> str:
    """``5400`` → ``1.5 h``; keeps three significant figures."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def fmt(value: object, kind: Kind) -> str:
    """``value`` as a column of ``kind`` shows it (``–`` for a missing or infinite value)."""
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
    return f"{float(value):,.2f}"


def best_avg_jct(results: Sequence[SimResult]) -> float:
    """The lowest finite average JCT among ``results`` (NaN when none finished a job)."""
    return min((r.summary.avg_jct_s for r in results if math.isfinite(r.summary.avg_jct_s)),
               default=math.nan)


def jct_ratio(result: SimResult, best: float) -> float:
    """``result``'s average JCT over ``best`` (NaN when either is missing)."""
    return result.summary.avg_jct_s / best if best and math.isfinite(best) else math.nan


def legend(columns: Sequence[Column], marks: Sequence[tuple[str, str]] = ()) -> str:
    """One line per column (and per mark): ``header: meaning``."""
    return "\n".join([f"{c.header}: {c.meaning}" for c in columns]
                     + [f"{m}: {meaning}" for m, meaning in marks])


def _table(title: str, caption: str) -> Table:
    return Table(title=title or None, caption=caption, caption_justify="left",
                 header_style="bold")


def comparison_marks(results: Sequence[SimResult]) -> tuple[tuple[str, str], ...]:
    """:data:`MARKS`, plus the oracle mark when an oracle policy is among ``results``."""
    if any(policy_info(r.policy).oracle for r in results):
        return (*MARKS, (ORACLE_MARK, ORACLE_MEANING))
    return MARKS


def policies_caption(results: Sequence[SimResult]) -> str:
    """One line per compared policy: what it does and, for an oracle, what it reads."""
    return "\n".join(i.line() for i in policy_infos([r.policy for r in results]))


def comparison_table(results: Sequence[SimResult], title: str = "") -> Table:
    """One row per policy, its legend as the caption; the best average JCT is starred, an
    oracle policy marked ◆ (:mod:`tessera.report.policies`), and every policy's average JCT is
    also given as a ratio to the best. The caption ends with one line per policy."""
    best = best_avg_jct(results)
    columns = comparison_columns(results)
    table = _table(title, legend(columns, comparison_marks(results)) + "\n"
                   + policies_caption(results))
    table.add_column("policy")
    for c in columns:
        table.add_column(c.header, justify="right")
    table.add_column(RATIO_HEADER, justify="right")
    for r in results:
        d = r.as_dict()
        ratio = jct_ratio(r, best)
        name = policy_info(r.policy).marked + (f" {BEST_MARK}" if ratio == 1.0 else "")
        table.add_row(name, *(fmt(d[c.key], c.kind) for c in columns), f"{ratio:.2f}×")
    return table


def wait_caption(results: Sequence[SimResult]) -> str:
    """What the waiting table's numbers are means of, and what it cannot show."""
    jobs = results[0].summary.jobs if results else 0
    text = f"Means over all {jobs:,} jobs.\n" + legend(WAIT_COLUMNS)
    if any(not r.pending_recorded for r in results):
        text += f"\n–: {PENDING_NOT_RECORDED}."
    return text


def wait_split_table(results: Sequence[SimResult], title: str = "") -> Table:
    """Why jobs waited: time pending per job over all its spells, split by reason. The first
    column repeats the comparison's *start wait*, which counts only the spell before the
    first run, so a preemptive policy can show 0 there and hours of pending."""
    table = _table(title or "time pending, by reason (mean per job)", wait_caption(results))
    table.add_column("policy")
    for c in WAIT_COLUMNS:
        table.add_column(c.header, justify="right")
    for r in results:
        d = r.as_dict()
        table.add_row(policy_info(r.policy).marked,
                      *(fmt(d[c.key], c.kind) for c in WAIT_COLUMNS))
    return table
