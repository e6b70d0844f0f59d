"""Cost of the Philly lessons in the simulator, side by side (ratios, one run).

Runs the bundled Philly week (or ``--limit`` jobs of it) on the ``philly`` preset with fifo:

* plain (no quotas, failures off, no validation) -- the reference;
* quotas split among the VCs by demand, no borrowing;
* early/late failures at 30 % (no validation), then with validation of gangs >= 8 GPUs;
* the locality sweep's extremes (0 and 2 h).

Prints wall seconds, the ratio to the plain run, and the figures each feature is about
(wait split, GPU-hours lost and saved, split GPU-hours). Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_lessons.py [--limit 3322]

Shared, noisy machines: compare the rows of one run with each other.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from tessera.model.cluster import load_cluster
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import FailureConfig, QuotaConfig, SimConfig, ValidationConfig
from tessera.sim.engine import simulate
from tessera.workload import load_trace


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--cluster", default="philly")
    args = ap.parse_args()
    w = load_trace("philly", limit=args.limit)
    c = load_cluster(args.cluster, 8)
    fail = FailureConfig(job_failure_rate=0.3, time_model="early-late")
    configs = {
        "plain": SimConfig(),
        "quotas (demand, no borrowing)": SimConfig(quotas=QuotaConfig(split="demand")),
        "failures 30 %": SimConfig(failures=fail),
        "failures 30 % + validation ≥8": SimConfig(
            failures=fail, validation=ValidationConfig(min_gpus=8, validation_s=600)),
        "locality wait 0": SimConfig(scheduler=SchedulerSettings(locality_wait_s=0)),
        "locality wait 2 h": SimConfig(scheduler=SchedulerSettings(locality_wait_s=7200)),
    }
    t = Table("run", "wall s", "÷ plain", "events", "avg queue s", "quota h", "capacity h",
              "fragmentation h", "GPU-h lost", "validation GPU-h", "split GPU-h",
              title=f"{w.name} ({len(w)} jobs) on {c.describe()}, fifo", header_style="bold")
    base = None
    for name, cfg in configs.items():
        t0 = time.perf_counter()
        r = simulate(w, c, "fifo", cfg)
        wall = time.perf_counter() - t0
        base = base or wall
        s, x = r.summary, r.extras
        t.add_row(name, f"{wall:.2f}", f"{wall / base:.2f}", f"{r.events:,}",
                  f"{s.avg_queue_delay_s:.1f}", f"{s.wait_quota_h:.2f}",
                  f"{s.wait_capacity_h:.2f}", f"{s.wait_fragmentation_h:.2f}",
                  f"{s.gpu_hours_lost_to_failures:.1f}", f"{x.get('validation_gpu_h', 0):.1f}",
                  f"{x.get('split_gpu_h', 0):,.0f}")
    Console(width=200).print(t)


if __name__ == "__main__":
    main()
