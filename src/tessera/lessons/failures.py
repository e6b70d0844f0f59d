"""Failures that waste GPUs, and pre-run validation that catches them early.

One baseline simulation (no validation) and one per validation threshold (gangs of at least
``min_gpus`` GPUs first run ``validation_s`` on one GPU), all with the ``early-late`` failure
model and the same seed -- so every run sees exactly the same failures (the model draws per job
and attempt) and differs only in where they strike.

GPU-hours *lost* are the failed runs' work since their last checkpoint plus their restore time,
times the GPUs they held (``docs/lessons.md``). The table's columns add up, so a reader can check
each from the others (:data:`FAILURE_COLUMNS`):

    GPU-h lost = lost on gangs + lost in validation
    cost       = lost on gangs + validation GPU-h      (validation GPU-h, passed or failed)
    saved      = cost of the "no validation" run − cost
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
from tessera.sim.config import FailureConfig, SimConfig, ValidationConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import SimResult

#: The study's table, column by column: (header, what it measures). The CLI prints the meanings
#: under the table.
FAILURE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run", "no validation, or gangs of at least N GPUs first run on one GPU"),
    ("lost on gangs", "GPU-h of failed runs on the whole gang: work since the last checkpoint "
     "plus the restore, × its GPUs"),
    ("lost in validation", "GPU-h of validation runs that failed (part of validation GPU-h)"),
    ("GPU-h lost", "lost on gangs + lost in validation: every GPU-hour failures wasted"),
    ("validation GPU-h", "GPU-h of every 1-GPU validation run, passed or failed"),
    ("cost GPU-h", "lost on gangs + validation GPU-h: what failures and checking for them cost"),
    ("GPU-h saved", "cost GPU-h of \"no validation\" − this run's cost GPU-h"),
    ("failures", "failed runs (every run sees the same failures: drawn per job and attempt)"),
    ("caught early", "failures that struck during validation, on one GPU"),
    ("failed jobs", "jobs that failed for good (retries used up)"),
    ("avg JCT", "mean completion time (finish − submission), jobs that succeeded"),
    ("JCT ÷ none", "avg JCT ÷ the avg JCT of \"no validation\""),
    ("multi-GPU JCT", "mean completion time of gangs of 2 GPUs or more"),
)


@dataclass(frozen=True, slots=True)
class FailureRow:
    """One run of the failure study."""

    label: str
    min_gpus: int
    lost_gpu_h: float
    lost_on_gangs_gpu_h: float
    lost_in_validation_gpu_h: float
    validation_gpu_h: float
    cost_gpu_h: float
    """``lost_on_gangs_gpu_h + validation_gpu_h``."""
    saved_gpu_h: float
    """The ``no validation`` row's ``cost_gpu_h`` minus this row's."""
    failures: int
    caught_in_validation: int
    failed_jobs: int
    avg_jct_s: float
    p50_jct_s: float
    jct_ratio: float
    avg_jct_multi_s: float
    avg_queue_s: float


def _multi_jct(r: SimResult) -> float:
    v = [j.jct_s for j in r.jobs if j.jct_s is not None and j.num_gpus > 1]
    return float(np.mean(v)) if v else math.nan


def failure_study(
    workload: Workload,
    cluster: ClusterSpec,
    *,
    min_gpus: Sequence[int] = (2, 8),
    failure_rate: float = 0.3,
    repeat_probability: float = 0.5,
    early_share: float = 0.6,
    early_window_s: float = 600.0,
    validation_s: float = 600.0,
    checkpoint_interval_s: float = 1800.0,
    policy: str = "fifo",
    seed: int = 0,
    table: ThroughputTable | None = None,
) -> list[FailureRow]:
    """Simulate without validation, then with validation for each threshold in ``min_gpus``."""
    fcfg = FailureConfig(job_failure_rate=failure_rate, repeat_probability=repeat_probability,
                         time_model="early-late", early_share=early_share,
                         early_window_s=early_window_s,
                         checkpoint_interval_s=checkpoint_interval_s)
    base_cfg = SimConfig(failures=fcfg, seed=seed)
    runs: list[tuple[str, int, SimResult]] = [
        ("no validation", 0, simulate(workload, cluster, policy, base_cfg, table))]
    for n in min_gpus:
        cfg = base_cfg.model_copy(update={
            "validation": ValidationConfig(min_gpus=n, validation_s=validation_s)})
        runs.append((f"validate ≥{n} GPUs", n, simulate(workload, cluster, policy, cfg, table)))
    base = runs[0][2]
    base_cost = base.summary.gpu_hours_lost_to_failures  # (no validation: all on gangs)
    rows = []
    for label, n, r in runs:
        s, x = r.summary, r.extras
        lost = s.gpu_hours_lost_to_failures
        val_h = x.get("validation_gpu_h", 0.0)
        in_val = x.get("failure_gpu_h_in_validation", 0.0)
        cost = (lost - in_val) + val_h
        rows.append(FailureRow(
            label=label, min_gpus=n, lost_gpu_h=lost,
            lost_on_gangs_gpu_h=lost - in_val, lost_in_validation_gpu_h=in_val,
            validation_gpu_h=val_h, cost_gpu_h=cost, saved_gpu_h=base_cost - cost,
            failures=sum(j.failures for j in r.jobs),
            caught_in_validation=int(x.get("failures_in_validation", 0)),
            failed_jobs=s.failed, avg_jct_s=s.avg_jct_s, p50_jct_s=s.p50_jct_s,
            jct_ratio=s.avg_jct_s / base.summary.avg_jct_s if base.summary.avg_jct_s else math.nan,
            avg_jct_multi_s=_multi_jct(r), avg_queue_s=s.avg_queue_delay_s,
        ))
    return rows


def write_failure_outputs(rows: Sequence[FailureRow], out: Path, title: str = "") -> list[Path]:
    """``failures.csv`` and ``failures.png`` (GPU-hours by where they went, per run)."""
    out.mkdir(parents=True, exist_ok=True)
    p_csv = out / "failures.csv"
    with p_csv.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(asdict(rows[0])))
        w.writeheader()
        for row in rows:
            w.writerow(asdict(row))
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    labels = [r.label for r in rows]
    x = np.arange(len(rows))
    gang = np.array([r.lost_on_gangs_gpu_h for r in rows])
    inval = np.array([r.lost_in_validation_gpu_h for r in rows])
    over = np.array([r.validation_gpu_h - r.lost_in_validation_gpu_h for r in rows])
    left.bar(x, gang, label="lost: failures on the gang")
    left.bar(x, inval, bottom=gang, label="lost: failures caught in validation")
    left.bar(x, over, bottom=gang + inval, label="validation runs that passed")
    left.set_xticks(x, labels, fontsize=8)
    left.set_ylabel("GPU-hours")
    left.set_title("GPU-hours lost to failures")
    left.legend(fontsize=7)
    left.grid(alpha=0.3, axis="y")
    right.bar(x - 0.2, [r.avg_jct_s / 3600 for r in rows], width=0.4, label="all jobs")
    right.bar(x + 0.2, [r.avg_jct_multi_s / 3600 for r in rows], width=0.4,
              label="multi-GPU jobs")
    right.set_xticks(x, labels, fontsize=8)
    right.set_ylabel("average JCT (hours)")
    right.set_title("JCT impact")
    right.legend(fontsize=7)
    right.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    p_png = out / "failures.png"
    fig.savefig(p_png, dpi=110)
    plt.close(fig)
    return [p_csv, p_png]
