"""Synergy's published point and the ordering of its Fig. 8, reproduced in Tessera's simulator.

Synergy (OSDI'22) reports, in its artifact's README (= the paper's Fig. 8), FIFO + Synergy-TUNE
at 9 jobs/h, class split (image, language, speech) = (20, 70, 10), single-GPU jobs on its
128-GPU cluster (16 × 8 V100, 24 CPUs and 500 GB per server): **mean JCT 21.88 h, p99
156.93 h**. Like Synergy's runner, this script draws a stream of jobs
(:func:`tessera.workload.synergy.generate_synergy_like`) on ``synergy-128`` and measures the
JCT of jobs 4000-4999 only (its ``series_id_filter``: the cluster is in steady state by
then), for each resource mode (``fifo:resources=proportional|greedy|tune|opt``).

Printed per (load, mode): mean and p99 JCT (hours) over the measured jobs, averaged over the
seeds, and the run's decision time; for the published point also the gap to Synergy's
figures. ``--point`` runs the published point alone. ``--repack`` runs Synergy's round model
instead of Tessera's default (:mod:`tessera.sched.resources.repack`): ``resources=MODE:repack=
round``, 300 s rounds, moves free of checkpoint and restore.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_synergy.py --point --seeds 0,1,2 --per-seed
    PYTHONPATH=src .venv/bin/python benchmarks/bench_synergy.py --loads 9,8,7 \
        --modes tune,greedy,proportional --seeds 0,1 [--repack]

(each run simulates a 7,000-job stream up to its last arrival, minutes on a busy core: a loaded
cluster queues hundreds of jobs)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tessera.model.cluster import load_cluster
from tessera.model.jobs import Workload
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import SimResult
from tessera.workload.synergy import generate_synergy_like, parse_split

PUBLISHED = {"mean_h": 21.88, "p99_h": 156.93}
MEASURED = (4000, 5000)
MODES = ("proportional", "greedy", "tune", "opt")
#: Synergy's round model: 300 s rounds, a move costs nothing (every lease ends each round).
SYNERGY_ROUNDS = SchedulerSettings(mode="rounds", round_s=300.0, checkpoint_s=0.0,
                                   restore_s=0.0)


def run(load: float, mode: str, seed: int, split: tuple[int, int, int], jobs: int,
        multi_gpu: bool = False, repack: bool = False) -> tuple[float, float, float]:
    """``(mean JCT h, p99 JCT h, decide s)`` of the measured jobs of one run.

    Synergy's runner keeps jobs arriving until every measured job has finished (and stops
    there); a stream of ``jobs`` that ends earlier leaves the last measured jobs an emptying
    cluster. So the run stops at the stream's last arrival, and is drawn again with 25 % more
    jobs until every measured job has finished by then (:func:`outlasts`)."""
    while True:
        w = generate_synergy_like(jobs, load, seed, split, multi_gpu)
        cfg = SimConfig(max_sim_time_s=w.jobs[-1].submit_time_s,
                        scheduler=SYNERGY_ROUNDS if repack else SchedulerSettings())
        policy = f"fifo:resources={mode}" + (":repack=round" if repack else "")
        r = simulate(w, load_cluster("synergy-128"), policy, cfg)
        if outlasts(w, r):
            break
        jobs = int(jobs * 1.25)
    lo, hi = MEASURED
    jct = np.array([x.jct_s for x in r.jobs
                    if x.jct_s is not None and lo <= int(x.job_id) < hi]) / 3600
    if len(jct) < hi - lo:
        raise SystemExit(f"only {len(jct)} of the measured jobs finished ({mode}, {load} jobs/h)")
    return float(jct.mean()), float(np.percentile(jct, 99)), r.decide_s


def outlasts(w: Workload, r: SimResult) -> bool:
    """Whether every measured job finished before the stream's last arrival (as in Synergy's
    runner, whose arrivals never stop before its measurement does)."""
    lo, hi = MEASURED
    ends = [x.finish_s for x in r.jobs if lo <= int(x.job_id) < hi]
    return (len(ends) == hi - lo and all(e is not None for e in ends)
            and w.jobs[-1].submit_time_s >= max(e for e in ends if e is not None))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loads", default="9", help="jobs/h, comma-separated")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seeds", default="0", help="comma-separated")
    ap.add_argument("--split", default="20,70,10")
    ap.add_argument("--jobs", type=int, default=7000,
                    help="jobs drawn per run (more when the stream ends before the measured jobs)")
    ap.add_argument("--multi-gpu", action="store_true")
    ap.add_argument("--point", action="store_true", help="the published point only (TUNE, 9/h)")
    ap.add_argument("--per-seed", action="store_true", help="also print each seed's figures")
    ap.add_argument("--repack", action="store_true",
                    help="Synergy's round model: repack=round, 300 s rounds, free moves")
    a = ap.parse_args()
    split = parse_split(a.split)
    loads = [9.0] if a.point else [float(x) for x in a.loads.split(",")]
    modes = ["tune"] if a.point else a.modes.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"{'jobs/h':>6} {'mode':>12} {'mean JCT h':>10} {'p99 JCT h':>10} {'decide s':>8}")
    for load in loads:
        for mode in modes:
            t0 = time.perf_counter()
            res = []
            for s in seeds:
                res.append(run(load, mode, s, split, a.jobs, a.multi_gpu, a.repack))
                if a.per_seed:
                    print(f"{'':6} {'seed ' + str(s):>12} {res[-1][0]:10.2f} {res[-1][1]:10.2f}",
                          flush=True)
            mean_h = float(np.mean([r[0] for r in res]))
            p99_h = float(np.mean([r[1] for r in res]))
            dec = float(np.mean([r[2] for r in res]))
            line = f"{load:6g} {mode:>12} {mean_h:10.2f} {p99_h:10.2f} {dec:8.2f}"
            if mode == "tune" and load == 9.0 and split == (20, 70, 10) and not a.multi_gpu:
                line += (f"   vs Synergy 21.88 / 156.93: "
                         f"{mean_h / PUBLISHED['mean_h'] - 1:+.1%} / "
                         f"{p99_h / PUBLISHED['p99_h'] - 1:+.1%}")
            print(line + f"   ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
