"""Average JCT of Tessera's JCT policy against the Gavel-style baselines, side by side.

Every policy runs on the same inputs in one process, one after another, so the ratios are not
skewed by a noisy shared machine. Settings:

* ``light`` / ``heavy``: Gavel-like synthetic traces (``generate_gavel_like``) on
  ``v100:12,p100:12,k80:12`` at a low and a high arrival rate;
* ``philly``: the bundled Philly week on ``v100:256,p100:128,k80:64``, 8 GPUs per server
  (the ``tessera demo`` setting).

Costs are Tessera's defaults (``SimConfig()``: each policy's preferred mode, 30 + 30 s
checkpoint/restore); ``--compat-gavel`` adds the synthetic settings under ``compat="gavel"``
(no preemption cost, 360 s rounds, Gavel's progress accounting).

The table shows average JCT (hours) per policy, the best Gavel-style baseline
(fifo, las, max_min_fairness, finish_time_fairness) and the ratio ours / best baseline
(< 1 means ours is better), plus the number of jobs left unfinished.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_policies.py            # ~5 min on 2 cores
    PYTHONPATH=src .venv/bin/python benchmarks/bench_policies.py --quick    # ~1 min
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.model.jobs import Workload
from tessera.perf.profiles import default_throughputs
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import generate_gavel_like, read_trace

BASELINES = ("fifo", "las", "max_min_fairness", "finish_time_fairness")
OURS = ("hetero_srpt", "hetero_gittins")


@dataclass(frozen=True)
class Setting:
    name: str
    workload: Workload
    cluster: ClusterSpec
    config: SimConfig


def settings(args: argparse.Namespace) -> list[Setting]:
    table = default_throughputs()
    small = load_cluster(args.synthetic_cluster, 1)
    out = []
    for label, rate in (("light", args.light_rate), ("heavy", args.heavy_rate)):
        wl = generate_gavel_like(args.jobs, rate, args.seed, throughputs=table)
        out.append(Setting(f"{label} ({rate:g}/h)", wl, small, SimConfig()))
        if args.compat_gavel:
            out.append(Setting(f"{label} gavel-compat", wl, small, SimConfig(compat="gavel")))
    if args.philly_limit != 0:
        limit = args.philly_limit if args.philly_limit > 0 else None
        wl = read_trace("philly", limit=limit, throughputs=table).workload
        out.append(Setting("philly week" + (f" (first {limit})" if limit else ""), wl,
                           load_cluster("v100:256,p100:128,k80:64", 8), SimConfig()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200, help="jobs per synthetic trace")
    ap.add_argument("--light-rate", type=float, default=0.3, help="jobs/hour, light load")
    ap.add_argument("--heavy-rate", type=float, default=1.0, help="jobs/hour, heavy load")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synthetic-cluster", default="v100:12,p100:12,k80:12")
    ap.add_argument("--philly-limit", type=int, default=-1,
                    help="first N Philly jobs (-1: the whole week, 0: skip Philly)")
    ap.add_argument("--compat-gavel", action="store_true",
                    help="also run the synthetic settings with compat='gavel'")
    ap.add_argument("--quick", action="store_true", help="200 jobs, first 1500 Philly jobs")
    ap.add_argument("--policies", default=",".join(BASELINES + OURS))
    args = ap.parse_args()
    if args.quick:
        args.jobs, args.philly_limit = 200, 1500
    pols = [p for p in args.policies.split(",") if p]
    ours = [p for p in pols if p.split("-")[0] in OURS]
    base = [p for p in pols if p not in ours]
    width = max(len(p) for p in pols)
    print(f"avg JCT (h); ratio = ours / best Gavel-style baseline ({', '.join(base)})")
    print(f"{'setting':<24} " + " ".join(f"{p:>{width}}" for p in pols)
          + f" {'best base':>{width}} " + " ".join(f"{'ratio ' + p:>{width + 6}}" for p in ours))
    t0 = time.perf_counter()
    for s in settings(args):
        jct: dict[str, float] = {}
        unfinished: dict[str, int] = {}
        for p in pols:
            r = simulate(s.workload, s.cluster, p, s.config)
            jct[p] = r.summary.avg_jct_s / 3600
            unfinished[p] = r.summary.unfinished
        best = min(base, key=lambda p: jct[p]) if base else ""
        cells = " ".join(
            f"{jct[p]:>{width}.2f}" if not unfinished[p] else f"{f'{jct[p]:.2f}*':>{width}}"
            for p in pols
        )
        ratios = " ".join(
            f"{jct[p] / jct[best]:>{width + 6}.3f}" if best and jct[best] > 0
            else f"{'-':>{width + 6}}"
            for p in ours
        )
        print(f"{s.name:<24} {cells} {best:>{width}} {ratios}", flush=True)
        if any(unfinished.values()):
            print(f"{'':<24} * unfinished jobs: "
                  + ", ".join(f"{p} {n}" for p, n in unfinished.items() if n))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
