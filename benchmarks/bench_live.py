"""Live service benchmark: submission throughput, submit-to-running latency, live vs simulator.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_live.py [--submissions N]``

1. **Submissions/s** through the API: in-process (FastAPI TestClient), and end to end against
   the service and uvicorn running as ``tessera serve`` does (``server.uvicorn_config``) in a
   **server process of their own**, with 1, 4 and 8 client threads in this process (keep-alive
   ``http.client`` connections, one per thread: a client light enough not to be what is
   measured). Afterwards the server's store must hold exactly the accepted jobs (none lost).
   The server process's and the clients' CPU time per submission are printed too: less at the
   mercy of the machine's other load than a rate.
   With ``--before OLD_TREE/src`` the server process runs on the older tree's sources and on
   this one's, alternately, ``--spells`` times each (default 2: the machine is shared, so each
   side is measured in several spells), and both are printed side by side with their medians
   and the load average. ``--before-plain`` runs the older tree on uvicorn's ``h11`` parser and
   asyncio loop, as it ran before ``httptools``/``uvloop`` were installed (uvicorn's ``auto``
   picks them up by itself where they are, old tree or not).
2. **Submit → running** on a free local cluster: the gap between the ``submitted`` and
   ``running`` events of a 1-GPU job, over repeated submissions.
3. **Live vs simulator**: ~20 ``sleep S`` jobs run live (local executor, FIFO) and in
   :func:`tessera.sim.engine.simulate` with the same arrival times, where a job ``sleep S`` is a
   JobSpec of ``S`` steps at 1 step/s on every flavor (a throughput table built for the run)
   and checkpoint/restore costs are off. Per-job JCT is compared.

The machine is shared and noisy: read the order of magnitude and the ratios.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.executors.base import free_port
from tessera.live.executors.local import LocalExecutor
from tessera.live.layout import default_work_dir
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import CONFIG_NAME, Principal, hash_token, load_tenancy
from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.model.jobs import JobId, JobSpec, Workload
from tessera.perf.profiles import ThroughputTable
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate

TOKEN = "bench-token"
CLUSTER = "v100:4,t4:4"


def _service(state: Path, cluster: ClusterSpec) -> LiveService:
    state.mkdir(parents=True)
    # A tree with per-queue caps (tessera.live.totals): room for every job the benchmark sends.
    caps = ", max_queued_jobs: 1000000, max_stored_jobs: 1000000" \
        if importlib.util.find_spec("tessera.live.totals") else ""
    (state / CONFIG_NAME).write_text(
        f"queues:\n- {{name: bench, nominal_gpus: 64{caps}}}\n"
        f"tokens:\n- {{name: admin, sha256: {hash_token(TOKEN)}, queue: null}}\n")
    work = default_work_dir(state)
    svc = LiveService(Store(state / "state.db"), LocalExecutor(work / "runs", grace_s=1.0),
                      cluster, load_tenancy(state), "fifo", work,
                      ServiceOptions(period_s=1.0, poll_s=0.05, grace_s=1.0))
    svc.start()
    return svc


def _cancel_all(svc: LiveService) -> None:
    admin = Principal("admin", None)
    holders = {a.job_id for a in svc.store.allocations()}
    active = svc.store.jobs(active_only=True)
    for r in sorted(active, key=lambda r: r.job_id not in holders):  # running jobs first
        svc.cancel(r.job_id, admin)
    deadline = time.monotonic() + 60
    while svc.store.allocations() and time.monotonic() < deadline:
        time.sleep(0.1)


JOB = {"name": "b", "queue": "bench", "command": "sleep 600", "gpus": 1}


def bench_in_process(root: Path, n: int) -> list[tuple[str, str]]:
    """Submissions through FastAPI's TestClient: the app without HTTP or uvicorn."""
    svc = _service(root / "inproc", load_cluster(CLUSTER, 4))
    try:
        h = {"Authorization": f"Bearer {TOKEN}"}
        with TestClient(create_app(svc)) as tc:
            t0 = time.perf_counter()
            ok = sum(tc.post("/api/jobs", json=JOB, headers=h).status_code == 201
                     for _ in range(n))
            dt = time.perf_counter() - t0
    finally:
        _cancel_all(svc)
        svc.stop()
    return [("submissions/s, in-process TestClient", f"{ok / dt:,.0f} ({ok}/{n} ok)")]


def serve_child(state: str, port: int, plain: bool = False) -> None:
    """``--serve-child``: the service and uvicorn on ``127.0.0.1:port``, configured as
    ``tessera serve`` configures them, until stdin closes; then prints the jobs stored.

    ``plain``: uvicorn on its pure-Python parser and loop (``h11``, asyncio), as a tree whose
    ``serve`` does not choose them ran where ``httptools`` and ``uvloop`` were not installed.
    """
    import uvicorn

    svc = _service(Path(state), load_cluster(CLUSTER, 4))
    app = create_app(svc)
    plain_http = {"http": "h11", "loop": "asyncio"} if plain else {}
    try:
        from tessera.live.server import uvicorn_config
        config = uvicorn_config(app, host="127.0.0.1", port=port, **plain_http)
    except ImportError:  # an older tree: what its ``serve`` ran
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                **plain_http)
    server = uvicorn.Server(config)
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.05)
    print("ready", flush=True)
    cpu0_s = time.process_time()
    sys.stdin.read()
    cpu_s = time.process_time() - cpu0_s
    server.should_exit = True
    th.join(timeout=10)
    print(json.dumps({"stored": len(svc.store.jobs()), "cpu_s": cpu_s}), flush=True)
    _cancel_all(svc)
    svc.stop()


def _post_all(port: int, threads: int, per: int) -> tuple[int, float]:
    """``threads`` keep-alive clients posting ``per`` jobs each; (accepted, seconds)."""
    body = json.dumps(JOB).encode()
    head = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    counts = [0] * threads

    def work(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(per):
            conn.request("POST", "/api/jobs", body, head)
            r = conn.getresponse()
            r.read()
            counts[i] += r.status == 201
        conn.close()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts), time.perf_counter() - t0


def bench_server_process(root: Path, n: int, src: str, plain: bool = False
                         ) -> dict[str, float]:
    """Submissions/s with 1, 4 and 8 client threads against a server process running the
    sources in ``src`` (``plain``: on h11/asyncio); also ``stored`` and ``accepted`` (equal
    when none was lost), and the server's and the clients' CPU per submission."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    child = subprocess.Popen([sys.executable, __file__, "--serve-child", str(root), str(port)]
                             + (["plain"] if plain else []),
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the server process did not start")
        out: dict[str, float] = {}
        accepted = 0
        client0_s = time.process_time()
        for threads in (1, 4, 8):
            ok, dt = _post_all(port, threads, n // threads)
            accepted += ok
            out[f"threads_{threads}"] = ok / dt
        client_s = time.process_time() - client0_s
        child.stdin.close()
        told = json.loads(child.stdout.readline())
        out["stored"] = float(told["stored"])
        out["accepted"] = float(accepted)
        out["cpu_ms"] = 1000 * float(told["cpu_s"]) / max(accepted, 1)
        out["client_cpu_ms"] = 1000 * client_s / max(accepted, 1)
        out["load"] = os.getloadavg()[0]
        return out
    finally:
        if not child.stdin.closed:
            child.stdin.close()
        child.wait(timeout=120)


def bench_submissions(root: Path, n: int, before: str | None, spells: int = 2,
                      before_plain: bool = False) -> list[tuple[str, str]]:
    """The server-process figures: this tree's, or old and new alternately, ``spells`` each.

    ``before_plain``: the old tree's server on h11/asyncio, as it ran before ``httptools`` and
    ``uvloop`` were installed (uvicorn picks them by itself where they are).
    """
    here = str(Path(__file__).resolve().parent.parent / "src")
    sides = [("before", before), ("after", here)] if before else [("", here)]
    spells = spells if before else 1
    got: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for spell in range(spells):
        for name, src in sides:
            got[name].append(bench_server_process(root / f"srv-{name}-{spell}", n, src,
                                                  plain=before_plain and name == "before"))
    pair = " (before | after)" if before else ""

    def cells(key: str, fmt: str) -> str:
        return " | ".join(" / ".join(fmt.format(g[key]) for g in got[name]) for name, _ in sides)

    def medians(key: str, fmt: str) -> str:
        return " | ".join(fmt.format(statistics.median(g[key] for g in got[name]))
                          for name, _ in sides)

    rows = []
    for key, label in (("threads_1", "1 client thread"), ("threads_4", "4 client threads"),
                       ("threads_8", "8 client threads")):
        rows.append((f"submissions/s, uvicorn in its own process, {label}{pair}",
                     cells(key, "{:,.0f}")))
    rows.append(("server process CPU per submission, ms" + pair, cells("cpu_ms", "{:.2f}")))
    rows.append(("client process CPU per submission, ms" + pair,
                 cells("client_cpu_ms", "{:.2f}")))
    if before:
        rows.append(("median submissions/s, 8 client threads (before | after)",
                     medians("threads_8", "{:,.0f}")))
        rows.append(("median server CPU per submission, ms (before | after)",
                     medians("cpu_ms", "{:.2f}")))
    rows.append(("load average (1 min) after each spell" + pair, cells("load", "{:.1f}")))
    lost = [f"{g['stored']:.0f} / {g['accepted']:.0f}" for name, _ in sides for g in got[name]]
    rows.append(("jobs stored / accepted (none lost)", ", ".join(lost)))
    return rows


def bench_latency(root: Path, reps: int) -> list[tuple[str, str]]:
    svc = _service(root / "lat", load_cluster(CLUSTER, 4))
    admin = Principal("admin", None)
    gaps = []
    try:
        for _ in range(reps):
            jid = svc.submit(parse_request("name: l\nqueue: bench\ncommand: 'true'"), admin).job_id
            while not svc.store.get(jid).final:  # type: ignore[union-attr]
                time.sleep(0.01)
            ev = {e.to_state: e.ts_s for e in svc.store.events(jid) if e.to_state}
            gaps.append(ev["running"] - ev["pending"])
    finally:
        svc.stop()
    gaps.sort()
    return [("submit → running, median (ms)", f"{1e3 * statistics.median(gaps):.1f}"),
            ("submit → running, max (ms)", f"{1e3 * gaps[-1]:.1f}")]


def _sleep_table(cluster: ClusterSpec, job_type: str) -> ThroughputTable:
    """1 step/s for ``job_type`` at every gang size on every flavor of ``cluster``."""
    sizes = range(1, cluster.total_gpus + 1)
    iso = {(f.short, cons): {(job_type, g): 1.0 for g in sizes}
           for f in cluster.flavors() for cons in (True, False)}
    return ThroughputTable("sleep commands (1 step/s)", iso, {}, cluster.flavors()[0].short)


def bench_sim_parity(root: Path, n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    cluster = load_cluster(CLUSTER, 4)
    plan = [(0.4 * i, rng.choice([2, 3, 4, 5]), rng.choice([1, 1, 2, 4])) for i in range(n)]
    svc = _service(root / "parity", cluster)
    admin = Principal("admin", None)
    ids = []
    t0 = time.time()
    try:
        for at_s, sleep_s, gpus in plan:
            time.sleep(max(0.0, t0 + at_s - time.time()))
            ids.append(svc.submit(parse_request(
                f"name: s\nqueue: bench\ncommand: sleep {sleep_s}\ngpus: {gpus}\n"
                f"expected_duration_s: {sleep_s}"), admin).job_id)
        while not all(svc.store.get(j).final for j in ids):  # type: ignore[union-attr]
            time.sleep(0.1)
        recs = [svc.store.get(j) for j in ids]
    finally:
        svc.stop()
    first = recs[0].job.spec.submit_time_s  # type: ignore[union-attr]
    specs = tuple(JobSpec(JobId(r.job_id), "sleep", r.job.spec.num_gpus,  # type: ignore[union-attr]
                          float(s), r.job.spec.submit_time_s - first)  # type: ignore[union-attr]
                  for r, (_a, s, _g) in zip(recs, plan, strict=True))
    res = simulate(Workload("live-parity", specs), cluster, "fifo",
                   SimConfig(scheduler=SchedulerSettings(mode="events", checkpoint_s=0,
                                                         restore_s=0), sample_every_s=1.0),
                   table=_sleep_table(cluster, "sleep"))
    sim_jct = {j.job_id: j.jct_s for j in res.jobs}
    errs = []
    for r in recs:
        live = r.finish_s - r.job.spec.submit_time_s  # type: ignore[union-attr,operator]
        errs.append(abs(live - sim_jct[r.job_id]) / sim_jct[r.job_id])  # type: ignore[union-attr]
    live_mean = statistics.mean(r.finish_s - r.job.spec.submit_time_s for r in recs)  # type: ignore[union-attr,operator]
    return [("live vs sim: jobs", str(n)),
            ("live vs sim: mean JCT live / sim (s)",
             f"{live_mean:.2f} / {statistics.mean(sim_jct.values()):.2f}"),
            ("live vs sim: per-job |JCT error|, mean", f"{100 * statistics.mean(errs):.1f} %"),
            ("live vs sim: per-job |JCT error|, max", f"{100 * max(errs):.1f} %"),
            ("live vs sim: jobs within 10 %", f"{sum(e <= 0.10 for e in errs)} / {n}")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=400)
    ap.add_argument("--latency-reps", type=int, default=20)
    ap.add_argument("--parity-jobs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--before", metavar="OLD_SRC",
                    help="an older tree's src/: submissions measured on both, side by side")
    ap.add_argument("--spells", type=int, default=2,
                    help="with --before: how many times each side is measured, alternately")
    ap.add_argument("--before-plain", action="store_true",
                    help="with --before: the old tree's server on uvicorn's h11 parser and "
                         "asyncio loop, as it ran before httptools and uvloop were installed")
    ap.add_argument("--serve-child", nargs="+", metavar="STATE PORT [plain]",
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_child:
        serve_child(args.serve_child[0], int(args.serve_child[1]),
                    plain=args.serve_child[2:] == ["plain"])
        return
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows += bench_submissions(root, args.submissions, args.before, args.spells,
                                  args.before_plain)
        if args.before:
            args.latency_reps = args.parity_jobs = 0
        else:
            rows += bench_in_process(root, args.submissions)
        if args.latency_reps:
            rows += bench_latency(root, args.latency_reps)
        if args.parity_jobs:
            rows += bench_sim_parity(root, args.parity_jobs, args.seed)
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print("-" * (width + 24))
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
