"""Decision latency per round against the number of active jobs.

For each size N, builds a snapshot of N active jobs (Gavel job types, gang sizes 1/2/4/8 in
Gavel's 70/10/15/5 mix) on a V100/P100/K80 cluster scaled with N, and times one full
``decide()`` round with the allocation recomputed (no cached shares): the LP policies solve
their HiGHS programmes inside the timed region. Prints median and max over repeats, and the
split by phase.

Targets (issue 2): max_min_fairness ≤ 50 ms at 2,048 active jobs. Reference: Gavel's LP takes
~70 ms at 2,048 jobs (its paper's policy-runtime study).

    .venv/bin/python benchmarks/bench_decide.py [--sizes 64,256,1024,2048,4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from tessera.model.cluster import parse_compact
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.context import DecisionContext
from tessera.sched.core import decide
from tessera.sched.oracle import ThroughputOracle
from tessera.sched.policy import make_policy
from tessera.sched.snapshot import JobView, Snapshot


def build(n: int, seed: int = 0) -> Snapshot:
    table = default_throughputs()
    rng = random.Random(seed)
    per_type = max(4, n // 6) // 4 * 4
    cluster = parse_compact(f"v100:{per_type},p100:{per_type},k80:{per_type}", 4)
    single, multi = table.job_types(), table.distributable_types()
    views = []
    for i in range(n):
        sf = rng.choices([1, 2, 4, 8], weights=[70, 10, 15, 5])[0]
        jt = rng.choice(single if sf == 1 else multi)
        spec = JobSpec(JobId(str(i)), jt, sf, rng.uniform(1e4, 1e6), float(i))
        views.append(JobView(spec, JobState.PENDING, spec.total_steps))
    return Snapshot(now_s=float(n), cluster=cluster, jobs=tuple(views))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256,1024,2048,4096")
    ap.add_argument("--policies", default="max_min_fairness,finish_time_fairness,las,"
                    "hetero_srpt,fifo")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'policy':<22}{'jobs':>6}{'GPUs':>7}{'median ms':>11}{'max ms':>9}  phases (ms)")
    for name in args.policies.split(","):
        policy = make_policy(name)
        for n in sizes:
            snap = build(n)
            oracle = ThroughputOracle(default_throughputs(), snap.cluster)
            times, phases = [], {}
            for r in range(args.repeats):
                t0 = time.perf_counter()
                d = decide(snap, policy, DecisionContext(oracle, random.Random(r)))
                times.append((time.perf_counter() - t0) * 1e3)
                phases = dict(d.phase_ms)
            ph = " ".join(f"{k}={v:.1f}" for k, v in phases.items())
            print(f"{name:<22}{n:>6}{snap.cluster.total_gpus:>7}"
                  f"{statistics.median(times):>11.1f}{max(times):>9.1f}  {ph}")


if __name__ == "__main__":
    main()
