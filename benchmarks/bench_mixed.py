"""Mixed gangs on and off, side by side: does letting a job span flavors shorten JCTs?

A *mixed gang* (``SimConfig(mixed_gangs=True)``, ``tessera simulate --mixed-gangs``) lets a job
that no single flavor can hold start on GPUs of several flavors, at the speed the planner
predicts (``tessera.sched.mixed.rates``). Every setting runs with the option off and on, for the
same seeds, in one process, so the ratios are not skewed by a noisy machine:

* ``small-pools``: Gavel-like traces (200 jobs, 0.5 jobs/h) on ``v100:8,p100:8,k80:8`` with
  4-GPU servers -- each flavor's pool is small, so big gangs often find no single flavor free;
* ``gavel-36``: the same generator at 1 job/h on ``v100:12,p100:12,k80:12`` (4-GPU servers);
* ``big-gangs``: ``small-pools`` with every 8-GPU job made a 12-GPU job -- more GPUs than any
  one flavor has, so without mixing those jobs are rejected at submission;
* ``sia-modern``: the Sia workloads ``sia-philly-1..8`` (160 jobs each, real submit times)
  on ``modern-mixed`` (16 A100 + 24 V100 + 24 T4, built from Sia's profiled hardware; Sia's
  evaluated cluster is ``sia-64``, with RTX 2080 Ti servers for the V100s) with the Sia
  throughput table; here a mix is predicted by the planner's cost model (the jobs name their
  application). Needs ``../shared/data/traces/sia_workloads`` (skipped when absent).

Printed: mean average JCT (hours) over the seeds with mixing off and on, their ratio
(on / off, < 1 means mixing helps), how many seeds improved, GPU-hours spent on mixed gangs,
and jobs rejected.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_mixed.py           # ~10 min on 2 cores
    PYTHONPATH=src .venv/bin/python benchmarks/bench_mixed.py --quick   # ~2 min
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, replace

from tessera.model.cluster import load_cluster
from tessera.model.jobs import Workload
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import generate_gavel_like, load_trace
from tessera.workload.known import find_data

POLICIES = ("fifo", "las", "hetero_srpt")


@dataclass(frozen=True)
class Setting:
    name: str
    cluster: str
    jobs_per_hour: float
    grow_8_to: int | None = None
    sia_traces: int = 0


SETTINGS = (
    Setting("small-pools", "v100:8,p100:8,k80:8", 0.5),
    Setting("gavel-36", "v100:12,p100:12,k80:12", 1.0),
    Setting("big-gangs", "v100:8,p100:8,k80:8", 0.5, grow_8_to=12),
    Setting("sia-modern", "modern-mixed", 0.0, sia_traces=8),
)


def _workload(s: Setting, seed: int, n_jobs: int) -> Workload:
    if s.sia_traces:
        return load_trace(f"sia-philly-{seed + 1}", throughputs=sia_throughputs())
    w = generate_gavel_like(n_jobs, s.jobs_per_hour, seed)
    if s.grow_8_to is None:
        return w
    grown = s.grow_8_to
    jobs = tuple(replace(j, num_gpus=grown) if j.num_gpus == 8 else j for j in w.jobs)
    return replace(w, jobs=jobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 100 jobs")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--settings", default=",".join(x.name for x in SETTINGS),
                    help="comma-separated settings to run")
    ap.add_argument("--min-speed", type=float, default=0.5,
                    help="mixed_min_speed (fraction of the best flavor's speed)")
    args = ap.parse_args()
    seeds = range(2 if args.quick else args.seeds)
    n_jobs = 100 if args.quick else 200
    print(f"{'setting':12s} {'policy':12s} {'off h':>8s} {'on h':>8s} {'on/off':>7s} "
          f"{'better':>7s} {'mixed GPU-h':>11s} {'rejected off/on':>16s}")
    t0 = time.perf_counter()
    wanted = set(args.settings.split(","))
    for s in SETTINGS:
        if s.name not in wanted:
            continue
        table: ThroughputTable = default_throughputs()
        runs = seeds
        if s.sia_traces:
            if find_data("traces/sia_workloads/philly/workload-1.csv") is None:
                print(f"{s.name:12s} skipped: the Sia workloads are not present")
                continue
            table = sia_throughputs()
            runs = range(min(s.sia_traces, 2) if args.quick else s.sia_traces)
        cluster = load_cluster(s.cluster, 4)
        for pol in POLICIES:
            off: list[float] = []
            on: list[float] = []
            mixed_h = 0.0
            rej = [0, 0]
            for seed in runs:
                w = _workload(s, seed, n_jobs)
                mixed = SchedulerSettings(mixed_gangs=True, mixed_min_speed=args.min_speed)
                for k, cfg in enumerate((SimConfig(seed=seed),
                                         SimConfig(scheduler=mixed, seed=seed))):
                    r = simulate(w, cluster, pol, cfg, table)
                    (off if k == 0 else on).append(r.summary.avg_jct_s / 3600)
                    rej[k] += r.summary.rejected
                    if k:
                        mixed_h += r.extras.get("mixed_gpu_h", 0.0)
            better = sum(b < a for a, b in zip(off, on, strict=True))
            m_off, m_on = statistics.mean(off), statistics.mean(on)
            print(f"{s.name:12s} {pol:12s} {m_off:8.2f} {m_on:8.2f} {m_on / m_off:7.3f} "
                  f"{better:>3d}/{len(off):<3d} {mixed_h / len(off):11.1f} "
                  f"{rej[0]:>8d}/{rej[1]:<7d}", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s; JCT averages over finished jobs: rejected "
          "jobs are not in them, so compare 'big-gangs' with the rejected column)")


if __name__ == "__main__":
    main()
