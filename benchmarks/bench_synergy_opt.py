"""Synergy-OPT's LP at 2,048 jobs on 1,024 GPUs, and what a resource mode adds to a decision.

Issue 33's Performance section asks for Synergy-OPT's LP at that size. The setting: 128 servers
of 8 V100s with Synergy's 24 CPUs and 500 GB each (``synergy-128`` eight times over), 2,048
Synergy-like jobs (multi-GPU sizes, split 20/70/10, all waiting at t = 0). Printed:

1. one ``decide()`` over the 2,048 waiting jobs, FIFO alone (GPUs only) and FIFO with each
   resource mode (the mode's share of the time is what it adds), best of ``--repeat``;
2. the OPT LP of the gangs that decision starts (every job that got GPUs): rows, columns,
   non-zeros, build and HiGHS solve time, the LP's summed speedup (the bound), the rounded
   allocation's summed speedup and the proportional one's (one per gang).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_synergy_opt.py     # ~1 min
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import replace

import numpy as np

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobState
from tessera.model.nodes import make_nodes
from tessera.model.resources import proportional_share
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.lp import solve_lp
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import JobView, Snapshot
from tessera.sched.resources.opt import build_opt_lp, opt_hosts
from tessera.sched.resources.speed import host_speedup, node_sizes
from tessera.workload.synergy import generate_synergy_like


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2048)
    ap.add_argument("--servers", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    v100 = load_v100()
    cluster = ClusterSpec(f"synergy-{8 * a.servers}", tuple(make_nodes(
        v100, a.servers, 8, rack="synergy", cpu_cores=24, mem_gib=500)))
    w = generate_synergy_like(a.jobs, 1e6, 0, multi_gpu=True)
    jobs = tuple(JobView(replace(j, submit_time_s=0.0), JobState.PENDING, j.total_steps)
                 for j in w.jobs)
    snap = Snapshot(0.0, cluster, jobs)
    oracle = ThroughputOracle(default_throughputs(), cluster)
    print(f"{a.jobs} waiting jobs on {cluster.total_gpus} GPUs ({a.servers} servers)")
    print(f"{'policy':>28} {'decide ms':>10} {'started':>8} {'x GPU-only':>10}")
    base = None
    started = None
    for spec in ("fifo", "fifo:resources=proportional", "fifo:resources=greedy",
                 "fifo:resources=tune", "fifo:resources=opt"):
        pol = make_policy(spec)
        best = float("inf")
        for _ in range(a.repeat):
            ctx = DecisionContext(oracle, random.Random(0))
            t0 = time.perf_counter()
            d = decide(snap, pol, ctx)
            best = min(best, time.perf_counter() - t0)
        base = base or best
        if spec == "fifo":
            started = d
        print(f"{spec:>28} {best * 1e3:10.1f} {len(d.started):8d} {best / base:10.2f}")
    assert started is not None
    by_id = {j.spec.job_id: j.spec for j in jobs}
    gangs = [(by_id[j], started.placements[j]) for j in started.started]
    sizes = node_sizes(cluster)
    free = {n: [c, m] for n, (_g, c, m) in sizes.items()}
    t0 = time.perf_counter()
    lp = build_opt_lp(gangs, free, sizes)
    t1 = time.perf_counter()
    x = solve_lp(lp.model, "Synergy-OPT LP")
    t2 = time.perf_counter()
    bound = float(np.dot(np.array([s for s in lp.model.cost]), x))
    chosen = opt_hosts(gangs, free, sizes)
    rounded = sum(host_speedup(s, replace(p, host_by_node=chosen[s.job_id]), cluster)
                  for s, p in gangs)
    prop = sum(host_speedup(s, replace(p, host_by_node=tuple(
        (n, *proportional_share(g, *sizes[n])) for n, g in p.gpus_by_node)), cluster)
        for s, p in gangs)
    rows, cols, nnz = lp.size
    print(f"\nOPT LP over the {len(gangs)} gangs FIFO starts: {rows} rows, {cols} columns, "
          f"{nnz} non-zeros; build {1e3 * (t1 - t0):.0f} ms, HiGHS {1e3 * (t2 - t1):.0f} ms")
    print(f"summed speedup: LP bound {bound:.1f}, rounded {rounded:.1f}, "
          f"proportional {prop:.1f} ({len(gangs)} gangs)")


def load_v100():  # type: ignore[no-untyped-def]
    from tessera.model.cluster import load_cluster

    return load_cluster("synergy-128").nodes[0].flavor


if __name__ == "__main__":
    main()
