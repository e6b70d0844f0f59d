"""Ray executor benchmark: launch throughput and submit → running latency on embedded Ray.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_ray_launch.py [--jobs N]
[--before OLD_TREE/src]``

1. **Launch throughput**: ``N`` one-GPU ``sleep 1`` jobs submitted at once to a service whose
   embedded Ray pretends to hold 128 GPUs (every job fits at once, so only launching limits
   them). Printed: gangs launched per second (the executor's ``launch`` returned: the
   scheduling loop is free again), gangs running per second (every rank's command started),
   and jobs finished per second.
2. **Submit → running**: one-GPU jobs submitted one at a time to an idle cluster; the gap
   between the ``submitted`` and ``running`` events, median and max.

With ``--before OLD_TREE/src`` the script runs as child processes on the older tree's sources
and on this one's, alternately, ``--spells`` times each (default 1), and prints every run side
by side with the ratio of the medians (it only uses ``LiveService`` and
``RayExecutor(cluster, None, runs_dir, grace_s=…)``, which both have). The machine is shared
and noisy: read the order of magnitude.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tessera.live.executors.ray.executor import RayExecutor
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import CONFIG_NAME, Principal, hash_token, load_tenancy
from tessera.model.cluster import load_cluster

ADMIN = Principal("admin", None)


def _service(state: Path, cluster_text: str) -> LiveService:
    state.mkdir(parents=True)
    (state / CONFIG_NAME).write_text(
        "queues:\n- {name: bench, nominal_gpus: 256}\n"
        f"tokens:\n- {{name: admin, sha256: {hash_token('t')}, queue: null}}\n")
    cluster = load_cluster(cluster_text, 8)
    svc = LiveService(Store(state / "state.db"),
                      RayExecutor(cluster, None, state / "runs", grace_s=1.0), cluster,
                      load_tenancy(state), "fifo", state,
                      ServiceOptions(period_s=0.5, poll_s=0.05, grace_s=1.0))
    svc.start()
    return svc


def _event_s(svc: LiveService, jid: str, to_state: str) -> float | None:
    return next((e.ts_s for e in svc.store.events(jid) if e.to_state == to_state), None)


def _wait(pred: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _cluster_cpu_s(svc: LiveService) -> float:
    """CPU seconds used so far by the embedded Ray cluster's processes (head, workers, rank
    hosts) and the children they reaped (the ranks' guardians and commands)."""
    from tessera.live.executors.ray.head import cluster_pids

    head = getattr(svc.executor, "head", None)
    if head is None:
        return 0.0
    total = 0
    for pid in cluster_pids(str(head.temp_dir)):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def bench_throughput(root: Path, jobs: int) -> dict[str, float]:
    svc = _service(root / "tput", "v100:64,t4:64")
    launched: list[float] = []
    real_launch = svc.executor.launch

    def timed_launch(spec: Any) -> None:
        real_launch(spec)
        launched.append(time.time())

    svc.executor.launch = timed_launch  # type: ignore[method-assign]
    try:
        cpu0_s, ray0_s = time.process_time(), _cluster_cpu_s(svc)
        t0 = time.time()
        ids = [svc.submit(parse_request(f"name: b{i}\nqueue: bench\ncommand: sleep 1"),
                          ADMIN).job_id for i in range(jobs)]
        finished = _wait(lambda: all(r.final for r in svc.store.jobs()), 60 + 10 * jobs)
        t_end = time.time()
        cpu_s, ray_cpu_s = time.process_time() - cpu0_s, _cluster_cpu_s(svc) - ray0_s
        running = sorted(t for j in ids if (t := _event_s(svc, j, "running")) is not None)
        print(f"{jobs} one-GPU `sleep 1` gangs, submitted at once (128 pretend GPUs):")
        if launched:
            print(f"  launched:  {len(launched)} in {launched[-1] - t0:.2f} s = "
                  f"{len(launched) / max(launched[-1] - t0, 1e-9):.1f} gangs/s")
        if running:
            print(f"  running:   {len(running)} in {running[-1] - t0:.2f} s = "
                  f"{len(running) / max(running[-1] - t0, 1e-9):.1f} gangs/s")
        ok = sum(r.state.value == "succeeded" for r in svc.store.jobs())
        print(f"  finished:  {ok} succeeded in {t_end - t0:.2f} s = {ok / (t_end - t0):.2f} "
              f"jobs/s{'' if finished else ' (timed out)'}")
        print(f"  CPU:       service {1000 * cpu_s / jobs:.0f} ms/gang, Ray cluster with the "
              f"ranks {1000 * ray_cpu_s / jobs:.0f} ms/gang; load average "
              f"{os.getloadavg()[0]:.1f}")
        return {"launched_per_s": len(launched) / max(launched[-1] - t0, 1e-9) if launched
                else 0.0,
                "running_per_s": len(running) / max(running[-1] - t0, 1e-9) if running
                else 0.0,
                "finished_per_s": ok / (t_end - t0), "succeeded": float(ok),
                "service_cpu_ms": 1000 * cpu_s / jobs, "ray_cpu_ms": 1000 * ray_cpu_s / jobs}
    finally:
        svc.stop()


def bench_latency(root: Path, samples: int) -> dict[str, float]:
    svc = _service(root / "lat", "v100:4,t4:4")
    gaps: list[float] = []
    try:
        for i in range(samples):
            jid = svc.submit(parse_request(f"name: l{i}\nqueue: bench\ncommand: sleep 30"),
                             ADMIN).job_id
            if _wait(lambda j=jid: _event_s(svc, j, "running") is not None, 120):
                sub = svc.store.get(jid)
                run_s = _event_s(svc, jid, "running")
                assert sub is not None and run_s is not None
                gaps.append(run_s - sub.job.spec.submit_time_s)
            svc.cancel(jid, ADMIN)
            _wait(lambda: not svc.store.allocations(), 60)
        if gaps:
            print(f"submit → running, {len(gaps)} one-GPU jobs on an idle cluster: median "
                  f"{1000 * statistics.median(gaps):.0f} ms, max {1000 * max(gaps):.0f} ms")
        return {"latency_median_ms": 1000 * statistics.median(gaps) if gaps else 0.0,
                "latency_max_ms": 1000 * max(gaps) if gaps else 0.0}
    finally:
        svc.stop()


ROWS = (("gangs launched/s (the loop free again)", "launched_per_s", "{:.1f}"),
        ("gangs running/s (every rank's command started)", "running_per_s", "{:.1f}"),
        ("jobs finished/s", "finished_per_s", "{:.2f}"),
        ("jobs succeeded", "succeeded", "{:.0f}"),
        ("service CPU per gang (ms)", "service_cpu_ms", "{:.0f}"),
        ("Ray cluster + ranks CPU per gang (ms)", "ray_cpu_ms", "{:.0f}"),
        ("submit → running, median (ms)", "latency_median_ms", "{:.0f}"),
        ("submit → running, max (ms)", "latency_max_ms", "{:.0f}"))


def measure(jobs: int, samples: int) -> dict[str, float]:
    """Both benchmarks on fresh embedded heads; their figures."""
    with tempfile.TemporaryDirectory(prefix="tsr-bench-", dir="/tmp") as tmp:
        try:
            return {**bench_latency(Path(tmp), samples), **bench_throughput(Path(tmp), jobs)}
        finally:
            with contextlib.suppress(ImportError):
                from tessera.live.executors.ray.head import EmbeddedHead

                for d in ("lat", "tput"):
                    EmbeddedHead(Path(tmp) / d).stop()


def _child(src: str, jobs: int, samples: int) -> dict[str, float]:
    """This script on the sources in ``src``, in a child process; its figures."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    out = subprocess.run([sys.executable, __file__, "--jobs", str(jobs), "--samples",
                          str(samples), "--json"], env=env, capture_output=True, text=True,
                         check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def compare(before_src: str, jobs: int, samples: int, spells: int = 1) -> None:
    """Before and after, alternately, ``spells`` times each; every spell and the medians
    printed side by side, with the load average after each run."""
    here = str(Path(__file__).resolve().parent.parent / "src")
    got: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(spells):
        for side, src in (("before", before_src), ("after", here)):
            got[side].append({**_child(src, jobs, samples), "load": os.getloadavg()[0]})
    print(f"{jobs} one-GPU `sleep 1` gangs at once on 128 pretend GPUs; {samples} one-GPU jobs "
          f"one at a time for the latency (embedded Ray); {spells} spell(s) each, alternately")
    print(f"{'measure':<50} {'before':>20} {'after':>20} {'median after/before':>20}")
    for label, key, fmt in (*ROWS, ("load average (1 min) after the run", "load", "{:.1f}")):
        cells = [" / ".join(fmt.format(g.get(key, 0.0)) for g in got[side])
                 for side in ("before", "after")]
        b = statistics.median(g.get(key, 0.0) for g in got["before"])
        a = statistics.median(g.get(key, 0.0) for g in got["after"])
        ratio = f"{a / b:.2f}" if b and key != "load" else "-"
        print(f"{label:<50} {cells[0]:>20} {cells[1]:>20} {ratio:>20}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--before", metavar="OLD_SRC",
                        help="an older tree's src/: run both and print them side by side")
    parser.add_argument("--spells", type=int, default=1,
                        help="with --before: runs of each side, alternately")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.before:
        compare(args.before, args.jobs, args.samples, args.spells)
        return
    figures = measure(args.jobs, args.samples)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
