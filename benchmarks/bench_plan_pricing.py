"""What pricing a 3-D job's gang costs the scheduler, cold and cached, beside a data-parallel job.

Run: ``PYTHONPATH=src python benchmarks/bench_plan_pricing.py``. One table, one row per (model,
gang): CPU and wall seconds of the first ``ThroughputOracle.placement_rate`` call (the plan
search), microseconds per cached call (median of 5 × 2,000), microseconds for the live
launch's ``ThreeDPlans.ranked`` on another placement of the same shape (no new search: rank
layout only), and, for scale, microseconds per cached call for a data-parallel job on the same
gang. Single runs on a shared, loaded machine: read the CPU column, not the wall one.
"""

from __future__ import annotations

import statistics
import time

from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId, JobSpec, ThreeDParallel
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Placement

CASES: tuple[tuple[str, int, tuple[tuple[str, int], ...]], ...] = (
    ("gpt3-1.3b", 16, (("A100-80GB", 4), ("V100-16GB", 4))),
    ("llama-7b", 64, (("A100-80GB", 8), ("V100-16GB", 8))),
    ("llama-7b", 64, (("A100-80GB", 8), ("A100-80GB", 8))),
    ("llama-13b", 128, (("A100-80GB", 8), ("A100-80GB", 8), ("V100-16GB", 8), ("V100-16GB", 8))),
)


def _placement(servers: tuple[tuple[str, int], ...], prefix: str) -> Placement:
    return Placement.mixed(tuple((f"{prefix}{k}", resolve_flavor(f), n)
                                 for k, (f, n) in enumerate(servers)))


def _cluster(servers: tuple[tuple[str, int], ...]) -> ClusterSpec:
    nodes = []
    for k, (f, n) in enumerate(servers):
        nodes += make_nodes(resolve_flavor(f), 1, n, start=k)
    return ClusterSpec("bench", tuple(nodes))


def _median_us(fn: object, calls: int = 2000, repeat: int = 5) -> float:
    assert callable(fn)
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(runs)


def _row(model: str, batch: int, servers: tuple[tuple[str, int], ...]) -> str:
    gpus = sum(n for _f, n in servers)
    oracle = ThroughputOracle(default_throughputs(), _cluster(servers))
    p3 = ThreeDParallel(model, batch)
    job = JobSpec(JobId("p3"), "ResNet-50 (batch size 64)", gpus, 100.0, 0.0, parallelism=p3)
    dp = JobSpec(JobId("dp"), "ResNet-50 (batch size 64)", gpus, 100.0, 0.0)
    p = _placement(servers, "n")
    c0, w0 = time.process_time(), time.perf_counter()
    rate = oracle.placement_rate(job, p)
    cold_cpu, cold_wall = time.process_time() - c0, time.perf_counter() - w0
    cached = _median_us(lambda: oracle.placement_rate(job, p))
    other = _placement(servers, "m").parts()
    launch = _median_us(lambda: oracle.plans.ranked(p3, other), 50)
    oracle.placement_rate(dp, p)
    dp_us = _median_us(lambda: oracle.placement_rate(dp, p))
    gang = "+".join(f"{n}x{f}" for f, n in servers)
    step = f"{1 / rate:.3f}" if rate > 0 else "no fit"
    return (f"{model:<10} {gang:<34} {step:>7} {cold_cpu:>10.2f} {cold_wall:>11.2f} "
            f"{cached:>9.2f} {launch:>9.1f} {dp_us:>9.2f}")


def main() -> None:
    print(f"{'model':<10} {'gang':<34} {'step s':>7} {'cold cpu s':>10} {'cold wall s':>11} "
          f"{'cached us':>9} {'launch us':>9} {'dp job us':>9}")
    for model, batch, servers in CASES:
        print(_row(model, batch, servers))


if __name__ == "__main__":
    main()
