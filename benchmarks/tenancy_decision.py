"""Decision latency under a tenancy (issue 32, Performance): 10,000 pending jobs in 200 queues
under a 3-level cohort tree with per-flavor quotas and fair sharing.

The cluster (V100/P100/K80, 8 GPUs a node, 4 of each flavor per queue: the quotas add up to
the cluster) is ~90% busy with running gangs of the same
queues, so the round must both place and explain. The same jobs are timed under each part of
the tenancy, side by side with the flat one-number quotas the core had before
(``Snapshot.quotas``):

* ``flat``: one-number quotas, no cohort (the plain round's admission);
* ``tree``: the same one-number quotas in the 3-level cohort tree (root -> 4 divisions ->
  20 teams -> 200 queues), borrowing through the tree;
* ``per-flavor``: per-flavor quotas in the tree (the quota binds at placement);
* ``+fair``: with fair sharing (dominant resource share order);
* ``+history``: admission by decayed usage (half-life 1 h);
* ``+reclaim``: every queue may reclaim (``Any``) and preempt lower priorities within itself.

Prints the median wall ms and CPU ms (``time.process_time``: on a shared machine the wall time
mostly measures the wait for a core) over the repeats, and the phases. Goal: median <= 100 ms
with every part on.

The inputs are moved out of the cycle collector's reach (``gc.freeze``) before timing, as the
simulator does with its workload (``sim/engine.py``): otherwise a collection of the oldest
generation, walking the benchmark's own 11,000 job views, lands in some decisions (about
40 ms each on this machine) and times the benchmark's heap rather than the decision.
``--no-freeze`` times them as they come.

    .venv/bin/python benchmarks/tenancy_decision.py [--jobs 10000] [--queues 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from dataclasses import replace

from tessera.model.cluster import ClusterSpec, parse_compact
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.quotas import (
    Cohort,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    ReclaimWithinCohort,
    WithinQueue,
)
from tessera.sched.core.snapshot import JobView, Snapshot
from tessera.sched.core.tenancy import FairSharing, Tenancy

RECLAIM = QueuePreemption(ReclaimWithinCohort.ANY, WithinQueue.LOWER_PRIORITY)


def jobs_and_cluster(n_jobs: int, n_queues: int, seed: int = 0
                     ) -> tuple[ClusterSpec, tuple[JobView, ...]]:
    """``n_jobs`` pending jobs spread over ``n_queues`` queues, plus running gangs that fill
    ~90% of a cluster sized at 4 GPUs of each flavor per queue."""
    rng = random.Random(seed)
    table = default_throughputs()
    per_flavor = max(8, n_queues * 4 // 8 * 8)  # 4 GPUs of each flavor per queue
    cluster = parse_compact(f"v100:{per_flavor},p100:{per_flavor},k80:{per_flavor}", 8)
    single, multi = table.job_types(), table.distributable_types()
    views: list[JobView] = []
    free = FreeGpus.of_snapshot(Snapshot(0.0, cluster, ()))
    flavors = list(free.flavors())
    busy, target = 0, int(cluster.total_gpus * 0.9)
    i = 0
    while busy < target:
        g = rng.choice([1, 2, 4])
        fl = flavors[i % len(flavors)]
        jt = rng.choice(single if g == 1 else multi)
        spec = JobSpec(JobId(f"r{i}"), jt, g, 1e6, 0.0, queue=f"q{i % n_queues}",
                       priority=rng.randint(0, 2))
        p = free.find(fl, g, False)
        i += 1
        if p is None:
            continue
        free.take(p)
        busy += g
        views.append(JobView(spec, JobState.RUNNING, 1e6, p, as_of_s=0.0,
                             progress_from_s=float(i)))
    for k in range(n_jobs):
        g = rng.choices([1, 2, 4, 8], weights=[70, 10, 15, 5])[0]
        jt = rng.choice(single if g == 1 else multi)
        spec = JobSpec(JobId(str(k)), jt, g, rng.uniform(1e4, 1e6), 1.0 + k * 0.01,
                       queue=f"q{rng.randrange(n_queues)}", priority=rng.randint(0, 2))
        views.append(JobView(spec, JobState.PENDING, spec.total_steps,
                             pending_since_s=spec.submit_time_s))
    return cluster, tuple(views)


def tenancies(cluster: ClusterSpec, n_queues: int) -> dict[str, Tenancy | None]:
    """The variants, by name (``flat`` is ``None``: the snapshot's one-number quotas)."""
    flavors: list[GpuFlavor] = list(dict.fromkeys(n.flavor for n in cluster.nodes))
    per_flavor_gpus = cluster.total_gpus // len(flavors)
    nominal = per_flavor_gpus // n_queues  # per queue and flavor
    cohorts = {"root": Cohort("root")}
    for d in range(4):
        cohorts[f"div{d}"] = Cohort(f"div{d}", "root")
    for t in range(20):
        cohorts[f"team{t}"] = Cohort(f"team{t}", f"div{t % 4}")

    def team(i: int) -> str:
        return f"team{i % 20}"

    any_tree = {f"q{i}": QueueQuota(f"q{i}", nominal * len(flavors), None, cohort=team(i))
                for i in range(n_queues)}
    per = {f"q{i}": QueueQuota.per_flavor(
        f"q{i}", {f: FlavorQuota(nominal, None, None) for f in flavors}, cohort=team(i),
        weight=1.0 + i % 3) for i in range(n_queues)}
    reclaim = {k: replace(q, preemption=RECLAIM) for k, q in per.items()}
    return {
        "flat": None,
        "tree": Tenancy(queues=any_tree, cohorts=cohorts),
        "per-flavor": Tenancy(queues=per, cohorts=cohorts),
        "+fair": Tenancy(queues=per, cohorts=cohorts, fair_sharing=FairSharing(enabled=True)),
        "+history": Tenancy(queues=per, cohorts=cohorts, fair_sharing=FairSharing(
            enabled=True, usage_half_life_s=3600.0)),
        "+reclaim": Tenancy(queues=reclaim, cohorts=cohorts,
                            fair_sharing=FairSharing(enabled=True)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--queues", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--no-freeze", action="store_true",
                    help="leave the inputs to the cycle collector (see the module docstring)")
    args = ap.parse_args()
    cluster, views = jobs_and_cluster(args.jobs, args.queues)
    flat = {f"q{i}": QueueQuota(f"q{i}", cluster.total_gpus // args.queues, None)
            for i in range(args.queues)}
    running = sum(1 for v in views if v.running)
    print(f"{args.jobs} pending + {running} running jobs, {args.queues} queues, "
          f"{cluster.total_gpus} GPUs, policy {args.policy}")
    print(f"{'variant':<12}{'median ms':>10}{'CPU ms':>9}{'started':>9}{'preempted':>11}"
          "  phases (median wall ms)")
    policy = make_policy(args.policy)
    for name, tenancy in tenancies(cluster, args.queues).items():
        if tenancy is not None:
            tenancy.check(n.flavor for n in cluster.nodes)
        snap = Snapshot(100.0, cluster, views, quotas=flat, tenancy=tenancy)
        ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster),
                              random.Random(0))
        decide(snap, policy, ctx)  # warm the oracle's caches
        if not args.no_freeze:
            gc.freeze()
        wall, cpu, phases = [], [], []
        d = None
        for r in range(args.repeats):
            snap = replace(snap, now_s=100.0 + r)
            w0, c0 = time.perf_counter(), time.process_time()
            d = decide(snap, policy, ctx)
            wall.append((time.perf_counter() - w0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
            phases.append(dict(d.phase_ms))
        assert d is not None
        ph = "  ".join(f"{k} {statistics.median(p.get(k, 0.0) for p in phases):.1f}"
                       for k in phases[0])
        print(f"{name:<12}{statistics.median(wall):>10.1f}{statistics.median(cpu):>9.1f}"
              f"{len(d.started):>9}{len(d.preempted):>11}  {ph}")


if __name__ == "__main__":
    main()
