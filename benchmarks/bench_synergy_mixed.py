"""Ours (``hetero_host``) vs Synergy-TUNE and Gavel's heterogeneity-aware policies on a cluster
whose server types differ in CPUs per GPU (issue 33, part 4).

Cluster ``synergy-mixed``: 12 × 8 V100 (24 CPUs, 500 GB) + 4 × 8 A100-40GB (128 CPUs, 1 TiB).
Workload: Synergy's draw (:func:`tessera.workload.synergy_mixed.generate_synergy_mixed`,
split 20/70/10, Synergy profiles) typed for the Sia table (V100 and A100 measured). JCT of
the jobs after the first ``--warmup`` (the cluster's start is not steady state), mean and p99
in hours, per load and seed.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_synergy_mixed.py --loads 9,12,15 \
        --seeds 0,1,2 --jobs 1500
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tessera.model.cluster import load_cluster
from tessera.perf.sia_table import sia_throughputs
from tessera.sim.engine import simulate
from tessera.workload.synergy import parse_split
from tessera.workload.synergy_mixed import generate_synergy_mixed

POLICIES = ("hetero_host", "fifo:resources=tune", "max_min_fairness", "finish_time_fairness",
            "hetero_srpt")


def run(policy: str, load: float, seed: int, jobs: int, warmup: int,
        split: tuple[int, int, int], multi_gpu: bool) -> tuple[float, float]:
    """``(mean JCT h, p99 JCT h)`` of jobs ``warmup``.. of one run."""
    w = generate_synergy_mixed(jobs, load, seed, split, multi_gpu)
    r = simulate(w, load_cluster("synergy-mixed"), policy, table=sia_throughputs())
    jct = np.array([x.jct_s for x in r.jobs if x.jct_s is not None and int(x.job_id) >= warmup])
    if len(jct) < jobs - warmup:
        raise SystemExit(f"{policy}: only {len(jct)} of {jobs - warmup} measured jobs finished")
    return float(jct.mean() / 3600), float(np.percentile(jct, 99) / 3600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loads", default="9,12,15", help="jobs/h, comma-separated")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--split", default="20,70,10")
    ap.add_argument("--multi-gpu", action="store_true")
    a = ap.parse_args()
    split = parse_split(a.split)
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"{'jobs/h':>6} {'policy':>22} {'seed':>4} {'mean h':>8} {'p99 h':>8} {'s':>5}")
    for load in (float(x) for x in a.loads.split(",")):
        for pol in a.policies.split(","):
            res = []
            for s in seeds:
                t0 = time.perf_counter()
                res.append(run(pol, load, s, a.jobs, a.warmup, split, a.multi_gpu))
                print(f"{load:6g} {pol:>22} {s:4d} {res[-1][0]:8.2f} {res[-1][1]:8.2f} "
                      f"{time.perf_counter() - t0:5.0f}", flush=True)
            print(f"{load:6g} {pol:>22} {'mean':>4} {np.mean([r[0] for r in res]):8.2f} "
                  f"{np.mean([r[1] for r in res]):8.2f}", flush=True)


if __name__ == "__main__":
    main()
