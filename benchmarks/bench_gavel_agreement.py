"""Agreement with Gavel: the five policies under ``--compat gavel`` on a Gavel-format trace.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_gavel_agreement.py [TRACE.tsv]
        [--jobs 120] [--rate 3] [--seed 0] [--solvers ecos,highs-ipm,highs] [--out trace.tsv]

Without a trace it draws one with :func:`tessera.workload.generate_gavel_like` and writes it
with :func:`tessera.workload.write_gavel_tsv` (``--out``), so the *same file* can be fed to
Gavel::

    python scripts/drivers/simulate_scheduler_with_trace.py -t trace.tsv -p <policy> \\
        --throughputs_file simulation_throughputs.json -c 12:12:12 \\
        --num_gpus_per_server 1:1:1 --time_per_iteration 360 --seed 0 --solver ECOS

(Gavel names: ``fifo`` = our ``fifo-agnostic``, ``fifo_perf`` = ``fifo``, ``max_min_fairness`` =
``max_min_fairness-agnostic``, ``max_min_fairness_perf`` = ``max_min_fairness``,
``finish_time_fairness_perf`` = ``finish_time_fairness``, ``min_total_duration_perf`` =
``min_total_duration``, ``min_total_duration`` = ``min_total_duration-agnostic``,
``max_sum_throughput_perf`` = ``max_sum_throughput``;
``fifo_packed``, ``max_min_fairness_packed``, ``gandiva`` and ``allox`` keep their names.)

If ``GAVEL_RESULTS`` names a JSON file ``{"<our policy name or Gavel's>": avg_jct_seconds}``
with Gavel's reported averages for that trace, or ``--gavel``/``GAVEL_SRC`` names a checkout of
Gavel's ``scheduler/`` directory (then Gavel itself is run on the same file through
``benchmarks/gavel_reference.py``), the ratio ours / Gavel's and the gap in seconds are
printed per policy.

It also prints sanity checks against Gavel's published qualitative behaviour (OSDI'20 §7): the
heterogeneity-aware policies beat their agnostic twins on average JCT.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tessera.model.cluster import load_cluster
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import generate_gavel_like, load_trace, write_gavel_tsv

POLICIES = (
    ("fifo-agnostic", "fifo"),
    ("fifo", "fifo_perf"),
    ("max_min_fairness-agnostic", "max_min_fairness"),
    ("max_min_fairness", "max_min_fairness_perf"),
    ("finish_time_fairness", "finish_time_fairness_perf"),
    ("fifo_packed", "fifo_packed"),
    ("max_min_fairness_packed", "max_min_fairness_packed"),
    ("min_total_duration", "min_total_duration_perf"),
    ("min_total_duration-agnostic", "min_total_duration"),
    ("gandiva", "gandiva"),
    ("allox", "allox"),
    ("max_sum_throughput", "max_sum_throughput_perf"),
)
#: Gavel's policies that only run one-GPU traces (AlloX asserts it; the packed max-min LP's
#: row reshape fails on mixed gang sizes).
SINGLE_GPU_ONLY = {"allox": "Gavel's AlloX asserts one-GPU jobs",
                   "max_min_fairness_packed": "Gavel's packed LP crashes on mixed gang sizes"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", help="a Gavel 10-column TSV (default: generate one)")
    ap.add_argument("--jobs", type=int, default=120)
    ap.add_argument("--rate", type=float, default=3.0, help="jobs per hour when generating")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (Gavel --seed is 0)")
    ap.add_argument("--solvers", default="auto", help="comma list of ecos,highs-ipm,highs,auto")
    ap.add_argument("--out", default="runs/bench/gavel_agreement_trace.tsv",
                    help="where to write the drawn TSV (default under the ignored runs/ folder)")
    ap.add_argument("--policies", default=",".join(p for p, _ in POLICIES))
    ap.add_argument("--single-gpu", action="store_true",
                    help="draw one-GPU jobs only (Gavel's packing experiments; AlloX needs it)")
    ap.add_argument("--gavel", default=os.environ.get("GAVEL_SRC"),
                    help="Gavel's scheduler/ directory: run Gavel itself for the reference "
                    "numbers (benchmarks/gavel_reference.py)")
    args = ap.parse_args(argv)

    if args.trace:
        trace_path = Path(args.trace)
    else:
        drawn = generate_gavel_like(args.jobs, jobs_per_hour=args.rate, seed=args.seed,
                                    multi_gpu=not args.single_gpu)
        trace_path = Path(args.out)
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        write_gavel_tsv(drawn, trace_path)
    # Simulate exactly what Gavel would read: the file, not the in-memory draw.
    workload = load_trace(trace_path, format="gavel")
    cluster = load_cluster("v100:12,p100:12,k80:12", gpus_per_server=1)
    gavel: dict[str, float] = {}
    if os.environ.get("GAVEL_RESULTS"):
        raw = json.loads(Path(os.environ["GAVEL_RESULTS"]).read_text())
        for ours, theirs in POLICIES:
            if ours in raw or theirs in raw:
                gavel[ours] = float(raw.get(ours, raw.get(theirs)))
    if args.gavel:
        gavel.update(_run_gavel(args.gavel, trace_path, [p.strip() for p in
                                                          args.policies.split(",")]))
    multi = any(j.num_gpus > 1 for j in workload.jobs)
    print(f"trace {trace_path} ({len(workload.jobs)} jobs), cluster {cluster.describe()}")
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()]
    wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
    names = dict(POLICIES)
    results: dict[tuple[str, str], float] = {}
    header = f"{'policy (Gavel name)':48} {'solver':10} {'avg JCT h':>10} {'makespan h':>11}"
    header += f" {'done':>5} {'wall s':>7}" + ("  ours/Gavel   gap s" if gavel else "")
    print(header)
    for pol in wanted:
        if multi and pol in SINGLE_GPU_ONLY:
            print(f"{pol + ' (' + names.get(pol, '?') + ')':48} skipped: the trace has "
                  f"multi-GPU jobs and {SINGLE_GPU_ONLY[pol]} (use --single-gpu)")
            continue
        for solver in solvers:
            cfg = SimConfig(compat="gavel", compat_solver=solver)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            r = simulate(workload, cluster, pol, cfg)
            s = r.summary
            results[(pol, solver)] = s.avg_jct_s
            line = (f"{pol + ' (' + names.get(pol, '?') + ')':48} {solver:10} "
                    f"{s.avg_jct_s / 3600:10.3f} {s.makespan_s / 3600:11.2f} "
                    f"{s.succeeded:5d} {time.perf_counter() - t0:7.1f}")
            if pol in gavel:
                line += f"  {s.avg_jct_s / gavel[pol]:10.6f} {s.avg_jct_s - gavel[pol]:7.2f}"
            print(line, flush=True)

    print("\nsanity vs Gavel's published behaviour (aware beats agnostic on avg JCT):")
    ok = True
    for solver in solvers:
        for aware, agn in (("max_min_fairness", "max_min_fairness-agnostic"),
                           ("fifo", "fifo-agnostic")):
            if (aware, solver) in results and (agn, solver) in results:
                a, b = results[(aware, solver)], results[(agn, solver)]
                good = a < b
                ok &= good
                print(f"  [{solver}] {aware}: {a / 3600:.2f} h vs {agn}: {b / 3600:.2f} h "
                      f"-> {b / a:.2f}x {'OK' if good else 'UNEXPECTED'}")
    if len(solvers) > 1:
        print("\nsolver sensitivity (avg JCT relative to the first solver):")
        ref = solvers[0]
        for pol in wanted:
            base = results.get((pol, ref))
            if base:
                rel = ", ".join(f"{s} {results[(pol, s)] / base:.3f}" for s in solvers[1:])
                print(f"  {pol:28} {rel}")
    return 0 if ok else 1


def _run_gavel(src: str, trace: Path, policies: list[str]) -> dict[str, float]:
    """Gavel's own average JCT per policy (ours → Gavel's name), run from a checkout."""
    names = dict(POLICIES)
    here = Path(__file__).with_name("gavel_reference.py")
    out: dict[str, float] = {}
    for pol in policies:
        done = subprocess.run([sys.executable, str(here), "--gavel", src, str(trace),
                               names.get(pol, pol)], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0 and done.stdout.strip():
            out[pol] = float(json.loads(done.stdout.strip().splitlines()[-1])["avg_jct_s"])
        else:
            print(f"Gavel failed on {names.get(pol, pol)}: {done.stderr.strip()[-300:]}")
    return out


if __name__ == "__main__":
    sys.exit(main())
