"""Elastic policies against Sia's published numbers, and their allocation latency.

**Part 1 -- Sia's workloads on Sia's cluster.** Every workload of Sia's three sets
(``sia-philly-1..8``, ``sia-saturn-1..10`` = Helios, ``sia-newtrace-1..10``) on ``sia-64``
(6 × 4 T4, 3 × 8 RTX 2080 Ti, 2 × 8 A100) with the Sia throughput table, for:

* ``sia``, ``pollux``, ``goodput_srpt`` (ours): 60 s rounds, elastic jobs resized, progress at
  goodput, each restart charged its model's measured time (:mod:`tessera.sim.elastic`);
* ``gavel``: the Gavel baseline Sia's artifact runs (its "Gavel with tuned jobs"):
  ``max_sum_throughput`` (Gavel's ``max_sum_throughput_perf``) in 360 s rounds, jobs rigid at
  the trace's GPU count and batch;
* ``gavel_mmf``: the same rigid jobs under ``max_min_fairness`` (Gavel's heterogeneity-aware
  LAS), this benchmark's Gavel-style baseline before 2026-12-02, kept so those figures stay
  reproducible.

Jobs are calibrated as Sia's simulator does (:func:`tessera.workload.elastic.sia_calibrated`:
cifar10 1.8×, other models 1.2× slower than profiled) unless ``--uncalibrated``, and, for the
elastic policies, tune their batch from their model's smallest validated batch ``M0`` up, as
Sia's simulator's adaptive jobs do (:func:`tessera.workload.elastic.tuned_from_m0`), unless
``--trace-batch-floor`` (the trace's batch as the floor, this benchmark's setting before
2026-12-02). Printed per
set: mean over its workloads of the average JCT, p99 JCT, makespan (h) and GPU-hours per job,
resizes per job, beside Sia's Table 3 average JCT and the ratio to it.

**Part 2 -- allocation latency.** One ``decide()`` round of each elastic policy with 64, 256
and 1,024 active elastic jobs (Sia's applications, mixed progress, half running) on ``sia-64``
and on a 1,024-GPU cluster of the same make-up (16 × ``sia-64``); median of ``--repeats``.
Printed cold (a fresh policy computes every goodput estimate) and warm (its next round: the
estimates are cached, as from one round to the next of a run, where progress moves a job to a
new epoch only now and then), CPU seconds with wall seconds in brackets (the machine may be
shared). Target: ≤ 1 s at 1,024 jobs.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_elastic.py --quick      # philly-1..2
    PYTHONPATH=src .venv/bin/python benchmarks/bench_elastic.py --sets philly --procs 2
    PYTHONPATH=src .venv/bin/python benchmarks/bench_elastic.py --latency-only
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace

from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import load_trace
from tessera.workload.datadir import find_data
from tessera.workload.elastic import elastic_range, sia_calibrated, tuned_from_m0

SETS = {"philly": 8, "saturn": 10, "newtrace": 10}
SIA_TABLE3_H = {  # Sia (SOSP'23) Table 3, average JCT (h): Philly / Helios / newTrace
    "sia": {"philly": 0.6, "saturn": 0.7, "newtrace": 0.7},
    "pollux": {"philly": 1.0, "saturn": 1.0, "newtrace": 1.5},
    "gavel": {"philly": 1.9, "saturn": 2.5, "newtrace": 11.3},
}
POLICIES = {  # label -> (registry name, round length s)
    "sia": ("sia", 60.0),
    "pollux": ("pollux", 60.0),
    "goodput_srpt": ("goodput_srpt", 60.0),
    "gavel": ("max_sum_throughput", 360.0),
    "gavel_mmf": ("max_min_fairness", 360.0),
}
#: Labels whose jobs stay rigid at the trace's GPU count and batch (no batch tuning from M0).
RIGID = frozenset({"gavel", "gavel_mmf"})


@dataclass(frozen=True)
class Row:
    avg_h: float
    p99_h: float
    makespan_h: float
    gpu_h_per_job: float
    resizes_per_job: float
    unfinished: int
    wall_s: float
    cpu_s: float


def run_one(task: tuple[str, str, bool] | tuple[str, str, bool, bool]) -> tuple[str, str, Row]:
    """Simulate one (workload, policy label[, calibrated[, batch from M0]]) pair."""
    name, label, calibrated = task[:3]
    from_m0 = task[3] if len(task) > 3 else True
    cpu0 = time.process_time()
    table = sia_throughputs()
    w = load_trace(name, throughputs=table)
    if calibrated:
        w = sia_calibrated(w)
    if from_m0 and label not in RIGID:
        w = tuned_from_m0(w)
    pol, round_s = POLICIES[label]
    cfg = SimConfig(scheduler=SchedulerSettings(round_s=round_s))
    r = simulate(w, load_cluster("sia-64"), pol, cfg, table)
    s = r.summary
    busy_s = sum(float(x.split("=")[1]) for j in r.jobs
                 for x in j.gpu_s_by_flavor.split(";") if x)
    return name, label, Row(s.avg_jct_s / 3600, s.p99_jct_s / 3600, s.makespan_s / 3600,
                            busy_s / 3600 / s.jobs, s.resizes / s.jobs, s.unfinished, r.wall_s,
                            time.process_time() - cpu0)


def comparison(sets: list[str], per_set: int | None, labels: list[str], calibrated: bool,
               procs: int, from_m0: bool = True, first: int = 1,
               per_workload: bool = False) -> None:
    tasks = [(f"sia-{s}-{i}", label, calibrated, from_m0) for s in sets
             for i in range(first, (per_set or SETS[s]) + 1) for label in labels]
    results = []
    with ProcessPoolExecutor(procs) as pool:
        for done in as_completed([pool.submit(run_one, t) for t in tasks]):
            name, label, r = done.result()
            results.append((name, label, r))
            print(f"  done {name} {label}: avg JCT {r.avg_h!r} h, {r.cpu_s:.1f} s CPU, "
                  f"{r.wall_s:.1f} s wall", file=sys.stderr, flush=True)
    order = {(f"sia-{s}-{i}", label): k for k, (s, i, label) in enumerate(
        (s, i, label) for s in sets for i in range(first, (per_set or SETS[s]) + 1)
        for label in labels)}
    results.sort(key=lambda t: order[(t[0], t[1])])
    print(f"\nSia workloads on sia-64 ({'calibrated as Sia' if calibrated else 'uncalibrated'}"
          f"; elastic batches from {'M0' if from_m0 else 'the trace batch'}); means over "
          "workloads")
    print(f"{'set':9} {'policy':13} {'n':>2} {'avg JCT h':>9} {'Sia T3':>6} {'ratio':>6} "
          f"{'p99 h':>6} {'mksp h':>7} {'GPU-h/job':>9} {'resz/job':>8} {'unfin':>5} "
          f"{'CPU s':>6} {'wall s':>6}")
    for s in sets:
        for label in labels:
            rows = [r for name, lab, r in results if lab == label and name.startswith(f"sia-{s}-")]
            avg = statistics.mean(r.avg_h for r in rows)
            pub = SIA_TABLE3_H.get(label, {}).get(s)
            ratio = f"{avg / pub:6.2f}" if pub else "     -"
            print(f"{s:9} {label:13} {len(rows):2d} {avg:9.3f} {pub or '-':>6} {ratio} "
                  f"{statistics.mean(r.p99_h for r in rows):6.2f} "
                  f"{statistics.mean(r.makespan_h for r in rows):7.2f} "
                  f"{statistics.mean(r.gpu_h_per_job for r in rows):9.2f} "
                  f"{statistics.mean(r.resizes_per_job for r in rows):8.2f} "
                  f"{sum(r.unfinished for r in rows):5d} "
                  f"{statistics.mean(r.cpu_s for r in rows):6.1f} "
                  f"{statistics.mean(r.wall_s for r in rows):6.1f}")
    if per_workload:
        print("\nper workload: avg JCT h (full precision), CPU s, wall s")
        for name, label, r in results:
            print(f"{name:18} {label:13} {r.avg_h!r:22} {r.cpu_s:6.1f} {r.wall_s:6.1f}")


MODELS = (("cifar10", 2048), ("deepspeech2", 320), ("bert", 384), ("yolov3", 64),
          ("imagenet", 1600))


def big_cluster(copies: int) -> ClusterSpec:
    """``copies`` × ``sia-64``, node ids made unique."""
    base = load_cluster("sia-64")
    nodes = tuple(replace(n, node_id=f"{n.node_id}-{k}") for k in range(copies)
                  for n in base.nodes)
    return ClusterSpec(f"{copies}x-sia-64", nodes)


def latency_snapshot(n_jobs: int, cluster: ClusterSpec, seed: int = 0) -> Snapshot:
    """``n_jobs`` elastic jobs, random models and progress; the first ones run on 1 GPU each
    while GPUs last (half the jobs at most)."""
    rng = random.Random(seed)
    free = [(node.node_id, node.flavor) for node in cluster.nodes for _ in range(node.gpus)]
    views = []
    for i in range(n_jobs):
        model, batch = MODELS[rng.randrange(len(MODELS))]
        e = elastic_range(model, 1, batch)
        spec = JobSpec(JobId(f"j{i}"), "ResNet-50 (batch size 64)", 1, 1000.0,
                       submit_time_s=0.0, elastic=e)
        left = 1000.0 * rng.random()
        if i < n_jobs // 2 and free:
            node, fl = free.pop()
            views.append(JobView(spec, JobState.RUNNING, left, Placement.of(fl, ((node, 1),)),
                                 as_of_s=600.0, progress_rate=0.1, progress_from_s=0.0))
        else:
            views.append(JobView(spec, JobState.PENDING, left, as_of_s=600.0))
    return Snapshot(600.0, cluster, tuple(views), round_s=60.0)


def _cell(times: list[tuple[float, float]]) -> str:
    """``CPU (wall)`` medians of ``(cpu_s, wall_s)`` pairs."""
    cpu = statistics.median(c for c, _ in times)
    return f"{cpu:5.3f} ({statistics.median(w for _, w in times):5.3f})"


def latency(repeats: int) -> None:
    table = sia_throughputs()
    print("\nAllocation latency: one decide() round, CPU s (wall s), median of repeats: a fresh "
          "policy (goodput estimates computed) / its next round (cached, as in a run)")
    print(f"{'cluster':12} {'jobs':>5} " + " ".join(f"{p:>27}" for p in POLICIES if p not in RIGID))
    for cluster in (load_cluster("sia-64"), big_cluster(16)):
        for n in (64, 256, 1024):
            snap = latency_snapshot(n, cluster)
            cells = []
            for label in ("sia", "pollux", "goodput_srpt"):
                cold: list[tuple[float, float]] = []
                warm: list[tuple[float, float]] = []
                for _ in range(repeats):
                    pol = make_policy(POLICIES[label][0])
                    ctx = DecisionContext(ThroughputOracle(table, cluster))
                    for times in (cold, warm):  # a fresh policy, then its second round
                        c0, t0 = time.process_time(), time.perf_counter()
                        decide(snap, pol, ctx)
                        times.append((time.process_time() - c0, time.perf_counter() - t0))
                cells.append(" / ".join(_cell(t) for t in (cold, warm)))
            print(f"{cluster.total_gpus:5d} GPUs   {n:5d} " + " ".join(f"{c:>27}" for c in cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="philly,saturn,newtrace")
    ap.add_argument("--per-set", type=int, default=None, help="workloads per set (default all)")
    ap.add_argument("--policies", default=",".join(p for p in POLICIES if p != "gavel_mmf"),
                    help=f"comma list of {', '.join(POLICIES)} (default: all but gavel_mmf)")
    ap.add_argument("--uncalibrated", action="store_true", help="jobs as profiled")
    ap.add_argument("--trace-batch-floor", action="store_true",
                    help="elastic jobs tune their batch from the trace's batch, not M0")
    ap.add_argument("--first", type=int, default=1, help="first workload of each set")
    ap.add_argument("--per-workload", action="store_true",
                    help="also print each workload's average JCT (full precision) and CPU s")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="philly-1..2 only, 1 latency repeat")
    ap.add_argument("--latency-only", action="store_true")
    ap.add_argument("--no-latency", action="store_true", help="part 1 only")
    args = ap.parse_args()
    if find_data("traces/sia_workloads") is None:
        print("../shared/data/traces/sia_workloads not found: part 1 skipped")
    elif not args.latency_only:
        sets = ["philly"] if args.quick else args.sets.split(",")
        per_set = 2 if args.quick else args.per_set
        comparison(sets, per_set, args.policies.split(","), not args.uncalibrated, args.procs,
                   not args.trace_batch_floor, args.first, args.per_workload)
    if not args.no_latency:
        latency(1 if args.quick else args.repeats)


if __name__ == "__main__":
    main()
