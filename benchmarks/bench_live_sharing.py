"""What co-location costs the live service's loop: ``act()`` and ``round()`` with many runs.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_live_sharing.py [--jobs N]
[--before OLD_TREE/src] [--spells K]``

A service on an executor that starts nothing (every launched run reports ``running`` at once,
so only the service's own work is timed) is filled with ``N`` one-GPU jobs, all running, on a
cluster of ``N`` V100s; then ``act()`` (the launch gate: read the held runs, count GPUs, signal)
and ``round()`` (snapshot, ``decide()``, journal) are timed, ``--reps`` calls each, in CPU time
(``time.process_time``) and wall time. Policies: ``fifo`` (no packing: the cost every service
pays) and ``hetero_pack`` on a queue with ``sharing: true`` and ``2N`` jobs on ``N`` GPUs (half
of them paired: the cost of the books :mod:`tessera.live.sharing` keeps).

With ``--before OLD_SRC`` each measurement runs in a child process on the older tree's sources
and on this one's, alternately, ``--spells`` times each (the machine is shared): the table
shows both, with the medians. An older tree refuses packing policies, so ``hetero_pack`` is
measured on this tree only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = "--child"


def _child(policy: str, jobs: int, reps: int) -> dict[str, float]:
    """Run in a child process (on whichever sources PYTHONPATH names); returns ms per call."""
    import yaml

    from tessera.live.executors.base import LaunchSpec, RunStatus
    from tessera.live.service import LiveService, ServiceOptions
    from tessera.live.spec import parse_request
    from tessera.live.store import Store
    from tessera.live.tenancy import CONFIG_NAME, Principal, hash_token, load_tenancy
    from tessera.model.cluster import load_cluster
    from tessera.sched.core.settings import SchedulerSettings

    class Instant:
        """Every launched run runs at once; nothing ever exits."""

        name = "instant"
        shares_gpus = True

        def __init__(self) -> None:
            self.runs: set[tuple[str, int]] = set()

        def launch(self, spec: LaunchSpec) -> None:
            self.runs.add((spec.job_id, spec.run))

        def status(self, job_id: str, run: int) -> RunStatus:
            return RunStatus("running" if (job_id, run) in self.runs else "absent")

        def stop(self, job_id: str, run: int, grace_s: float) -> bool:
            return True

        def release(self, job_id: str, run: int) -> None:
            self.runs.discard((job_id, run))

        def read_log(self, *a: object) -> None:
            return None

        def sharing_mechanism(self, host: tuple[str, int]) -> object:
            from tessera.live.executors.gpu_sharing import Mechanism

            return Mechanism("time-slicing")

        def close(self) -> None:
            pass

    packing = policy != "fifo"
    root = Path(tempfile.mkdtemp())
    state = root / "state"
    state.mkdir(mode=0o700)
    queue: dict[str, object] = {"name": "q", "nominal_gpus": 4 * jobs}
    if packing:
        queue["sharing"] = True
    cfg = {"queues": [queue], "tokens": [{"name": "admin", "sha256": hash_token("t"),
                                          "queue": None}]}
    (state / CONFIG_NAME).write_text(yaml.safe_dump(cfg))
    (state / CONFIG_NAME).chmod(0o600)
    cluster = load_cluster(f"v100:{jobs}", 8)
    svc = LiveService(Store(state / "state.db"), Instant(), cluster, load_tenancy(state),
                      policy, root / "work",
                      ServiceOptions(scheduler=SchedulerSettings(round_s=3600.0)))
    admin = Principal("admin", None)
    n = 2 * jobs if packing else jobs
    req = parse_request("name: b\nqueue: q\ncommand: 'true'\nflavors: [V100]\n"
                        "job_type: ResNet-18 (batch size 32)\nexpected_duration_s: 3600\n")
    for _ in range(n):
        svc.submit(req, admin)
    now = time.time()
    svc.round(now)
    for _ in range(3):
        svc.act(now)
    out: dict[str, float] = {"running": float(len(svc.store.allocations(("running",))))}
    for name, call in (("act", lambda: svc.act(time.time())),
                       ("round", lambda: svc.round(time.time()))):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(reps):
            call()
        out[f"{name}_cpu_ms"] = (time.process_time() - c0) / reps * 1e3
        out[f"{name}_wall_ms"] = (time.perf_counter() - w0) / reps * 1e3
    svc.executor.close()
    return out


def _measure(src: str, policy: str, jobs: int, reps: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    got = subprocess.run([sys.executable, __file__, CHILD, policy, str(jobs), str(reps)],
                         env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        print(json.dumps(_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--before", metavar="OLD_SRC", help="an older tree's src/, for A/B")
    ap.add_argument("--spells", type=int, default=2)
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent.parent / "src")
    print(f"load average {os.getloadavg()[0]:.1f}; {args.jobs} GPUs, {args.reps} calls each; "
          "ms per call (CPU / wall)")
    print(f"{'policy':<12} {'tree':<7} {'running':>7} {'act cpu':>8} {'act wall':>9} "
          f"{'round cpu':>10} {'round wall':>11}")
    for policy in ("fifo", "hetero_pack"):
        trees = [("new", here)]
        if args.before and policy == "fifo":
            trees.append(("before", args.before))
        rows: dict[str, list[dict[str, float]]] = {t: [] for t, _ in trees}
        for _ in range(args.spells):
            for tree, src in trees:
                r = _measure(src, policy, args.jobs, args.reps)
                rows[tree].append(r)
                print(f"{policy:<12} {tree:<7} {r['running']:>7.0f} {r['act_cpu_ms']:>8.2f} "
                      f"{r['act_wall_ms']:>9.2f} {r['round_cpu_ms']:>10.2f} "
                      f"{r['round_wall_ms']:>11.2f}")
        for tree, rs in rows.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{policy:<12} {tree + '~':<7} {'median':>7} {med['act_cpu_ms']:>8.2f} "
                  f"{med['act_wall_ms']:>9.2f} {med['round_cpu_ms']:>10.2f} "
                  f"{med['round_wall_ms']:>11.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
