"""A power-budget decision at 2,048 jobs against the plain decision (issue 34, Performance).

2,048 jobs on a 1,536-GPU V100/P100/K80 cluster (8 GPUs a node): gangs of 1/2/4/8 GPUs fill
~90 % of it and the rest wait. The same snapshot is decided plain and with a power budget of
80 % of the cluster's all-busy draw (so the budget binds: the stage caps limits and holds
jobs back), side by side, per policy. Prints the median wall ms and CPU ms
(``time.process_time``: on a shared machine wall time mostly measures the wait for a core)
over the repeats, the ``power`` phase, and the ratio budget / plain. Goal: ratio <= 2.

The power model is :func:`tessera.perf.power_estimate.default_power_model`. The inputs are
moved out of the cycle collector's reach (``gc.freeze``) before timing, as the simulator does.

    .venv/bin/python benchmarks/power_budget_decision.py [--jobs 2048] [--repeats 7]
        [--mode flow|exact] [--wait-fast]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from tessera.model.cluster import ClusterSpec, parse_compact
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.snapshot import JobView, Snapshot


def workload(n_jobs: int, seed: int = 0) -> tuple[ClusterSpec, tuple[JobView, ...]]:
    """``n_jobs`` jobs: running gangs filling ~90 % of the cluster, the rest pending."""
    rng = random.Random(seed)
    table = default_throughputs()
    cluster = parse_compact("v100:512,p100:512,k80:512", 8)
    single, multi = table.job_types(), table.distributable_types()
    free = FreeGpus.of_snapshot(Snapshot(0.0, cluster, ()))
    flavors = list(free.flavors())
    views: list[JobView] = []
    busy, target, i = 0, int(cluster.total_gpus * 0.9), 0
    while busy < target and len(views) < n_jobs:
        g = rng.choices([1, 2, 4, 8], weights=[70, 10, 15, 5])[0]
        spec = JobSpec(JobId(f"r{i}"), rng.choice(single if g == 1 else multi), g, 1e6, 0.0)
        p = free.find(flavors[i % len(flavors)], g, False)
        i += 1
        if p is None:
            continue
        free.take(p)
        busy += g
        views.append(JobView(spec, JobState.RUNNING, 1e6, p, as_of_s=0.0,
                             progress_from_s=float(i)))
    for k in range(n_jobs - len(views)):
        g = rng.choices([1, 2, 4, 8], weights=[70, 10, 15, 5])[0]
        spec = JobSpec(JobId(str(k)), rng.choice(single if g == 1 else multi), g,
                       rng.uniform(1e4, 1e6), 1.0 + k * 0.01)
        views.append(JobView(spec, JobState.PENDING, spec.total_steps,
                             pending_since_s=spec.submit_time_s))
    return cluster, tuple(views)


def _time(snap: Snapshot, policy: str, opts: PlacementOptions, repeats: int
          ) -> tuple[float, float, float, Decision]:
    walls, cpus, power = [], [], []
    d: Decision | None = None
    oracle = ThroughputOracle(default_throughputs(), snap.cluster)
    ctx = DecisionContext(oracle, random.Random(0))  # (kept between rounds, as drivers do)
    decide(snap, make_policy(policy), ctx, opts)  # warm the oracle's and the stage's caches
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        d = decide(snap, make_policy(policy), ctx, opts)
        cpus.append((time.process_time() - c0) * 1e3)
        walls.append((time.perf_counter() - w0) * 1e3)
        power.append(dict(d.phase_ms).get("power", 0.0))
    assert d is not None
    return statistics.median(walls), statistics.median(cpus), statistics.median(power), d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--policies", default="fifo,las,max_min_fairness")
    ap.add_argument("--mode", default="flow", choices=("flow", "exact"),
                    help="the budget stage's mode: flow (the greedy) or exact")
    ap.add_argument("--wait-fast", action="store_true",
                    help="starts on far slower boards may wait for a fast one")
    args = ap.parse_args()
    cluster, views = workload(args.jobs)
    snap = Snapshot(0.0, cluster, views)
    model = default_power_model()
    full_w = sum(n.gpus * model.estimate("", None, n.flavor).avg_power_w
                 for n in cluster.nodes)
    budget = PowerBudget(0.8 * full_w, model, args.mode, args.wait_fast)
    gc.freeze()
    print(f"{len(views)} jobs, {cluster.total_gpus} GPUs, budget {budget.budget_w / 1e3:.1f} kW "
          f"(80 % of all-busy {full_w / 1e3:.1f} kW)")
    print(f"{'policy':<18} {'plain ms':>9} {'budget ms':>10} {'power ms':>9} {'ratio':>6} "
          f"{'cpu ratio':>9} {'capped':>7} {'held':>5}")
    worst = 0.0
    for pol in args.policies.split(","):
        pw, pc, _, _ = _time(snap, pol, PlacementOptions(), args.repeats)
        bw, bc, bp, d = _time(snap, pol, PlacementOptions(power_budget=budget), args.repeats)
        held = sum(1 for r in d.pending.values() if "power budget" in str(r))
        worst = max(worst, bc / pc)
        print(f"{pol:<18} {pw:9.1f} {bw:10.1f} {bp:9.1f} {bw / pw:6.2f} {bc / pc:9.2f} "
              f"{len(d.power_limits_w):7d} {held:5d}")
    print(f"worst CPU ratio {worst:.2f} (goal <= 2): {'met' if worst <= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
