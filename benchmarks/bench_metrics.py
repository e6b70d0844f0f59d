"""What a ``/metrics`` scrape costs the live service, by the number of unfinished jobs.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_metrics.py [--jobs 1000 10000]``

For each size: a store with that many pending jobs (and their ``submitted`` events), a
service that is not started (no decision runs meanwhile), and
:meth:`~tessera.live.metrics.ServiceMetrics.render` timed: the first scrape (which counts the
whole event log) and the median of later ones (the event log unchanged). CPU milliseconds of
this process are printed beside the wall time: less at the mercy of the shared machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tessera.live.executors.local import LocalExecutor
from tessera.live.metrics import ServiceMetrics
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal, ensure_config, load_tenancy
from tessera.model.cluster import load_cluster

ADMIN = Principal("admin", None)


def _service(state: Path) -> LiveService:
    """A service on ``state`` (one ``default`` queue), not started."""
    cluster = load_cluster("v100:4,t4:4", 4)
    ensure_config(state, cluster.total_gpus)
    work = state.parent / "work"
    return LiveService(Store(state / "state.db"), LocalExecutor(work / "runs"), cluster,
                       load_tenancy(state), "fifo", work)


def _timed(fn: object) -> tuple[float, float]:
    """(wall ms, CPU ms) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3


def bench(jobs: int, repeats: int) -> str:
    with tempfile.TemporaryDirectory() as d:
        svc = _service(Path(d) / "state")
        svc.store_jobs([svc.admit(parse_request(
            f"name: j{i}\nqueue: default\nflavors: [{('v100', 't4')[i % 2]}]\n"
            "command: sleep 1"), ADMIN) for i in range(jobs)])
        m = ServiceMetrics(svc)
        first = _timed(m.render)
        later = [_timed(m.render) for _ in range(repeats)]
        svc.store.close()
    wall = statistics.median(t[0] for t in later)
    cpu = statistics.median(t[1] for t in later)
    return (f"| {jobs:>6,} | {first[0]:7.1f} | {first[1]:7.1f} | {wall:7.1f} | {cpu:7.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| pending jobs | first wall ms | first CPU ms | later wall ms | later CPU ms |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.jobs:
        print(bench(n, args.repeats))


if __name__ == "__main__":
    main()
