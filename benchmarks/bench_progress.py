"""What progress reports cost the live service (issue 35 part 4, "Performance").

Builds a service (local executor, not started) with ``--jobs`` active jobs, half of them with
measured rates on two flavors and on their own node, and times

* **apply**: one round's :func:`~tessera.live.learned.apply_learned` (overlay check for every
  job, silent-job notices, the slow-node rule), median of ``--repeat`` rounds after the first;
* **first apply**: the first round, which lays every measured job's overlay on the oracle.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_progress.py [--jobs 2048] [--repeat 20]

Goal (issue 35): updating every job's estimate at 2,048 active jobs within 10 ms per round.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tessera.live.executors.local import LocalExecutor
from tessera.live.learned import apply_learned
from tessera.live.progress import RunRate
from tessera.live.service import LiveService
from tessera.live.spec import to_live_job, validate_request
from tessera.live.store import NewJob, Store
from tessera.live.tenancy import Tenancy
from tessera.model.cluster import load_cluster
from tessera.sched.core.snapshot import QueueQuota


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        cluster = load_cluster("v100:512,t4:512", 8)
        tenancy = Tenancy(quotas={"default": QueueQuota("default", nominal_gpus=1024)}, tokens={})
        svc = LiveService(Store(root / "state.db"), LocalExecutor(root / "runs"), cluster,
                          tenancy, "fifo", root / "work")
        req = validate_request({"name": "b", "command": "true", "gpus": 1})
        jobs = [NewJob(to_live_job(req, f"j-{k:05d}", "default", 0.0), 0.0, "")
                for k in range(args.jobs)]
        svc.store.add_jobs(jobs)
        records = svc.store.jobs(active_only=True)
        now = time.time()
        reporting = [r.job_id for r in records[::2]]
        for k, jid in enumerate(reporting):
            svc.progress._keep(jid, RunRate(1, "T4", (f"t4-{k % 64:04d}",), 10.0, 10, now, now))
            svc.progress._keep(jid, RunRate(2, "V100-16GB", (f"v100-16gb-{k % 64:04d}",),
                                            30.0, 10, now, now))
        t0 = time.perf_counter()
        apply_learned(svc, records, now)
        first_ms = (time.perf_counter() - t0) * 1e3
        rounds = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            apply_learned(svc, records, now)
            rounds.append((time.perf_counter() - t0) * 1e3)
        svc.store.close()
    print(f"{args.jobs} active jobs, {len(reporting)} with measured rates on 2 flavors")
    print(f"first apply (every overlay laid): {first_ms:8.2f} ms")
    print(f"apply per round (median of {args.repeat}): {statistics.median(rounds):8.2f} ms "
          f"(max {max(rounds):.2f})")


if __name__ == "__main__":
    main()
