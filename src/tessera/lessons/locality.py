"""The locality trade-off: how long should a gang wait for one node before it is split?

Philly's scheduler waited for locality and relaxed it after a while; the study found that
relaxing it cuts queueing (fragmentation) delay but lowers utilisation, because a gang spread
over servers runs slower. We replay that with the ordinary simulator: one run per
``locality_wait_s`` threshold (``inf`` = never split), the same policy, seed and failures off.
A split gang runs at the profiles' unconsolidated speed, so its GPUs are held longer for the
same work; *useful utilization* subtracts that slowdown:

    useful = (busy GPU-hours − split slowdown GPU-hours) / (GPUs × makespan)

where the slowdown of a split run = GPUs × progress time × (1 − split rate / consolidated rate).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import Workload
from tessera.perf.profiles import ThroughputTable
from tessera.report.plots import _plt
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import JobRecord

DEFAULT_THRESHOLDS_S: tuple[float, ...] = (0.0, 300.0, 1800.0, 7200.0, math.inf)

#: The sweep's table, column by column: (header, what it measures). The CLI prints the
#: meanings under the table.
LOCALITY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("locality wait", "how long a gang waits for one server before it may be split"),
    ("start wait", "mean first start − submission, jobs that started"),
    ("multi-GPU start wait", "the same, gangs of 2 GPUs or more"),
    ("fragmentation", "mean time per job pending with enough GPUs free, but not on one "
     "server (every pending spell)"),
    ("capacity", "mean time per job pending while other jobs held the GPUs"),
    ("avg JCT", "mean completion time (finish − submission), jobs that succeeded"),
    ("multi-GPU JCT", "the same, gangs of 2 GPUs or more"),
    ("util", "GPU-time held by jobs ÷ (GPUs × makespan)"),
    ("useful util", "the same, minus the split slowdown"),
    ("split GPU-h", "GPU-hours held by gangs split across servers = the next two columns"),
    ("too big GPU-h", "split GPU-hours of gangs larger than any server: split at every "
     "threshold, never alone"),
    ("split by wait GPU-h", "split GPU-hours of gangs that fit one server but were split after "
     "the locality wait ran out (0 with never)"),
    ("split slowdown GPU-h", "the part of split GPU-h that one server would have saved (split "
     "gangs run at the profiles' unconsolidated speed; a gang too big for a server has no "
     "faster way to run, so it adds none)"),
    ("never started", "jobs still waiting when the run ended"),
)


@dataclass(frozen=True, slots=True)
class LocalityRow:
    """One threshold's outcome."""

    threshold_s: float
    avg_queue_s: float
    avg_queue_multi_s: float
    wait_fragmentation_s_mean: float
    wait_capacity_s_mean: float
    avg_jct_s: float
    avg_jct_multi_s: float
    utilization: float
    useful_utilization: float
    split_gpu_h: float
    too_big_gpu_h: float
    """Split GPU-hours of gangs larger than any server (they cannot wait for one)."""
    split_by_wait_gpu_h: float
    """``split_gpu_h − too_big_gpu_h``: gangs that fit one server, split after the wait."""
    split_slowdown_gpu_h: float
    busy_gpu_h: float
    never_started: int
    """Jobs still waiting at the end: with ``never``, gangs larger than any node (the core
    asks them for locality too; see ``docs/lessons.md``)."""


def threshold_label(s: float) -> str:
    if not math.isfinite(s):
        return "never"
    if s == 0:
        return "0"
    if s >= 3600 and s % 3600 == 0:
        return f"{s / 3600:g} h"
    if s >= 60 and s % 60 == 0:
        return f"{s / 60:g} min"
    return f"{s:g} s"


def parse_thresholds(text: str) -> list[float]:
    """``0,5m,30m,2h,never`` (or plain seconds) → seconds (``inf`` for never)."""
    out: list[float] = []
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        if part in ("never", "inf", "infinity"):
            out.append(math.inf)
        elif part.endswith("h"):
            out.append(float(part[:-1]) * 3600)
        elif part.endswith("min"):
            out.append(float(part[:-3]) * 60)
        elif part.endswith("m"):
            out.append(float(part[:-1]) * 60)
        else:
            out.append(float(part.removesuffix("s")))
    if not out or any(v < 0 for v in out):
        raise ValueError(f"bad thresholds {text!r}: give seconds, 5m, 2h or never")
    return out


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def locality_sweep(
    workload: Workload,
    cluster: ClusterSpec,
    thresholds_s: Sequence[float] = DEFAULT_THRESHOLDS_S,
    *,
    policy: str = "fifo",
    seed: int = 0,
    table: ThroughputTable | None = None,
) -> list[LocalityRow]:
    """One simulation per threshold; failures off, default checkpoint/restore costs."""
    rows = []
    for th in thresholds_s:
        r = simulate(workload, cluster, policy, SimConfig(
            scheduler=SchedulerSettings(locality_wait_s=th), seed=seed), table)
        s, x = r.summary, r.extras
        busy_h = s.utilization * cluster.total_gpus * s.makespan_s / 3600
        slow_h = x.get("split_slowdown_gpu_h", 0.0)
        cap_h = cluster.total_gpus * s.makespan_s / 3600
        multi = [j for j in r.jobs if j.num_gpus > 1]
        split_h = x.get("split_gpu_h", 0.0)
        too_big_h = min(_too_big_gpu_h(r.jobs, cluster.max_gpus_per_node()), split_h)
        rows.append(LocalityRow(
            threshold_s=th, avg_queue_s=s.avg_queue_delay_s,
            avg_queue_multi_s=_mean([j.queue_delay_s for j in multi
                                     if j.queue_delay_s is not None]),
            wait_fragmentation_s_mean=s.wait_fragmentation_h * 3600 / max(s.jobs, 1),
            wait_capacity_s_mean=s.wait_capacity_h * 3600 / max(s.jobs, 1),
            avg_jct_s=s.avg_jct_s,
            avg_jct_multi_s=_mean([j.jct_s for j in multi if j.jct_s is not None]),
            utilization=s.utilization,
            useful_utilization=(busy_h - slow_h) / cap_h if cap_h > 0 else math.nan,
            split_gpu_h=split_h, too_big_gpu_h=too_big_h,
            split_by_wait_gpu_h=split_h - too_big_h, split_slowdown_gpu_h=slow_h,
            busy_gpu_h=busy_h,
            never_started=sum(j.first_start_s is None and j.outcome != "rejected"
                              for j in r.jobs),
        ))
    return rows


def _too_big_gpu_h(jobs: Sequence[JobRecord], largest_node_gpus: int) -> float:
    """GPU-hours held by gangs larger than any server: every run of theirs is split."""
    gpu_s = 0.0
    for j in jobs:
        if j.num_gpus > largest_node_gpus:
            gpu_s += sum(float(part.split("=", 1)[1])
                         for part in j.gpu_s_by_flavor.split(";") if part)
    return gpu_s / 3600


def split_note(rows: Sequence[LocalityRow], workload: Workload, cluster: ClusterSpec,
               ) -> str | None:
    """Why a threshold that never splits still shows split GPU-hours (``None`` when no gang is
    larger than a server, or none of them ran)."""
    largest = cluster.max_gpus_per_node()
    big = sorted({j.num_gpus for j in workload.jobs if j.num_gpus > largest})
    if not big or not any(r.too_big_gpu_h > 0 for r in rows):
        return None
    n = sum(j.num_gpus > largest for j in workload.jobs)
    never = [r for r in rows if math.isinf(r.threshold_s)]
    text = (f"{n} gang(s) of {', '.join(map(str, big))} GPUs are larger than any server (at "
            f"most {largest} GPUs): they are split at every threshold, never alone, and their "
            "GPU-hours are the too big column")
    if never:
        text += (f"; with never, they are the only split gangs: all {never[0].split_gpu_h:,.0f} "
                 "split GPU-hours of that row are theirs")
    return text + "."


def _outcome(row: LocalityRow) -> tuple[object, ...]:
    """Everything a run measured, without the threshold that set it up."""
    return tuple(v for k, v in asdict(row).items() if k != "threshold_s")


def why_rows_tie(rows: Sequence[LocalityRow], workload: Workload, cluster: ClusterSpec,
                 ) -> str | None:
    """Why every threshold gave the same result, in words; ``None`` when the runs differ.

    A threshold matters only while a gang waits for one server with enough GPUs free. On a
    lightly loaded cluster that never happens: every gang that fits in a server finds one at
    once, and gangs larger than any server are split at once whatever the threshold (the
    decision core never asks them for locality), so all runs are the same run.
    """
    if len(rows) < 2 or any(_outcome(r) != _outcome(rows[0]) for r in rows[1:]):
        return None
    first = rows[0]
    text = f"All {len(rows)} thresholds give the same result"
    if first.wait_fragmentation_s_mean > 0:
        return text + "."
    text += (": no gang ever waited for locality (fragmentation wait 0 in every run). At this "
             f"load (GPUs held {100 * first.utilization:.1f} % of the time) every gang that "
             "fits in one server finds a free one at once, so the wait never starts")
    largest = cluster.max_gpus_per_node()
    big = sorted({j.num_gpus for j in workload.jobs if j.num_gpus > largest})
    if big:
        n = sum(j.num_gpus > largest for j in workload.jobs)
        sizes = ", ".join(str(g) for g in big)
        gangs = "the gang" if n == 1 else f"the {n} gangs"
        text += (f"; {gangs} larger than any server ({sizes} GPUs; servers hold at most "
                 f"{largest}) {'is' if n == 1 else 'are'} split at once whatever the "
                 "threshold")
        if any(math.isinf(r.threshold_s) for r in rows) and first.split_gpu_h > 0:
            # (with "never" no other gang is ever split, and every run is that run)
            text += f": all {first.split_gpu_h:,.0f} split GPU-hours are theirs"
    return text + (". To see the trade-off, load the cluster more: fewer GPUs (the Philly week "
                   "on -c p40:512, 64 servers of 8) or a higher --arrival-scale.")


def write_locality_outputs(rows: Sequence[LocalityRow], out: Path, title: str = "") -> list[Path]:
    """``locality.csv`` and ``locality.png`` (queueing delay and utilization per threshold)."""
    out.mkdir(parents=True, exist_ok=True)
    p_csv = out / "locality.csv"
    with p_csv.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["threshold", *asdict(rows[0])])
        w.writeheader()
        for row in rows:
            w.writerow({"threshold": threshold_label(row.threshold_s), **asdict(row)})
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    x = np.arange(len(rows))
    labels = [threshold_label(r.threshold_s) for r in rows]
    left.plot(x, [r.avg_queue_s / 60 for r in rows], "o-", label="all jobs")
    left.plot(x, [r.avg_queue_multi_s / 60 for r in rows], "s-", label="multi-GPU jobs")
    left.plot(x, [r.wait_fragmentation_s_mean / 60 for r in rows], "^--",
              label="fragmentation wait (per job)")
    left.set_xticks(x, labels)
    left.set_xlabel("locality wait before splitting a gang")
    left.set_ylabel("average queueing delay (min)")
    left.set_title("Queueing delay")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.plot(x, [100 * r.utilization for r in rows], "o-", label="GPUs held")
    right.plot(x, [100 * r.useful_utilization for r in rows], "s-",
               label="useful (minus split slowdown)")
    right.set_xticks(x, labels)
    right.set_xlabel("locality wait before splitting a gang")
    right.set_ylabel("GPU utilization (%)")
    right.set_title("Utilization")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    p_png = out / "locality.png"
    fig.savefig(p_png, dpi=110)
    plt.close(fig)
    return [p_csv, p_png]
