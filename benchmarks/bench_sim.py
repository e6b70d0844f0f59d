"""Simulator speed on the full Philly job table (82,247 jobs) on the ``philly`` preset.

Runs each policy once over the same workload and prints wall time, events per second, the
number of decision rounds and the mean decision time, plus the phase split. Target (issue 2):
``las`` under 60 s on 2 cores; the LP policy's time is reported beside it.

    .venv/bin/python benchmarks/bench_sim.py [--policies las,max_min_fairness] [--limit N]

Needs the public Philly table (``philly-full``: ../shared/data or $TESSERA_DATA_DIR).
"""

from __future__ import annotations

import argparse
import time

from tessera.model.cluster import load_cluster
from tessera.sim.engine import simulate
from tessera.workload import load_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="las,max_min_fairness")
    ap.add_argument("--trace", default="philly-full")
    ap.add_argument("--cluster", default="philly")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    workload = load_trace(args.trace, limit=args.limit)
    load_s = time.perf_counter() - t0
    cluster = load_cluster(args.cluster)
    print(f"{workload.name}: {len(workload):,} jobs loaded in {load_s:.1f} s; "
          f"{cluster.describe()}")
    print(f"{'policy':<20}{'wall s':>9}{'events':>10}{'events/s':>10}{'rounds':>9}"
          f"{'ms/round':>10}{'avg JCT h':>11}{'util':>7}  phases (s)")
    for policy in args.policies.split(","):
        r = simulate(workload, cluster, policy)
        d = r.as_dict()
        phases = " ".join(f"{k}={v / 1e3:.1f}" for k, v in r.phase_ms.items())
        print(f"{policy:<20}{r.wall_s:>9.1f}{r.events:>10,}{d['events_per_s']:>10,.0f}"
              f"{r.decisions:>9,}{d['decide_ms_mean']:>10.2f}{r.summary.avg_jct_s / 3600:>11.2f}"
              f"{r.summary.utilization:>7.3f}  {phases}")


if __name__ == "__main__":
    main()
