"""Space sharing: ``hetero_pack`` against every Gavel policy under ``--compat gavel``.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_packing.py [--jobs 100]
        [--loads 12,6,2] [--seeds 0,1,2] [--policies ...] [--solver auto]

For each load (jobs per hour) and seed it draws a one-GPU Gavel-like trace with
:func:`tessera.workload.generate_gavel_like` (Gavel's packed max-min LP cannot run traces with
mixed gang sizes: its row reshape fails), writes it as a Gavel TSV, reads the file back, and
simulates every policy on ``v100:12,p100:12,k80:12`` (one GPU per server) with Gavel's loop and
costs. Gavel's policies run as their compat twins, which reproduce Gavel's simulator on the same
file (``benchmarks/bench_gavel_agreement.py``). It prints, per trace, the average JCT of every
policy, then ``hetero_pack`` / the best Gavel policy, and fairness beside it: the 95th
percentile of the finish-time-fairness ρ and the longest wait before a first start.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tessera.model.cluster import load_cluster
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import SimResult
from tessera.workload import generate_gavel_like, load_trace, write_gavel_tsv

GAVEL = (
    ("fifo-agnostic", "fifo"),
    ("fifo", "fifo_perf"),
    ("fifo_packed", "fifo_packed"),
    ("max_min_fairness-agnostic", "max_min_fairness"),
    ("max_min_fairness", "max_min_fairness_perf"),
    ("max_min_fairness_packed", "max_min_fairness_packed"),
    ("finish_time_fairness", "finish_time_fairness_perf"),
    ("min_total_duration-agnostic", "min_total_duration"),
    ("min_total_duration", "min_total_duration_perf"),
    ("gandiva", "gandiva"),
    ("allox", "allox"),
)
OURS = ("hetero_gittins", "hetero_pack")


def _longest_wait_h(r: SimResult) -> float:
    return max((j.queue_delay_s or 0.0 for j in r.jobs), default=0.0) / 3600


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--loads", default="12,6,2", help="jobs per hour, comma list")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--policies", default=",".join([p for p, _ in GAVEL] + list(OURS)))
    ap.add_argument("--solver", default="auto", help="ecos | highs-ipm | highs | auto")
    args = ap.parse_args(argv)
    cluster = load_cluster("v100:12,p100:12,k80:12", gpus_per_server=1)
    wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
    gavel_names = dict(GAVEL)
    print(f"cluster {cluster.describe()}; {args.jobs} one-GPU jobs per trace; --compat gavel, "
          f"solver {args.solver}")
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for load in (float(x) for x in args.loads.split(",")):
            for seed in (int(x) for x in args.seeds.split(",")):
                drawn = generate_gavel_like(args.jobs, jobs_per_hour=load, seed=seed,
                                            multi_gpu=False)
                path = Path(tmp) / f"trace_{load:g}_{seed}.tsv"
                write_gavel_tsv(drawn, path)
                workload = load_trace(path, format="gavel")
                results: dict[str, SimResult] = {}
                for pol in wanted:
                    t0 = time.perf_counter()
                    cfg = SimConfig(compat="gavel", compat_solver=args.solver)  # type: ignore[arg-type]
                    r = simulate(workload, cluster, pol, cfg)
                    results[pol] = r
                    s = r.summary
                    print(f"  load {load:g}/h seed {seed} {pol:30} avg JCT "
                          f"{s.avg_jct_s / 3600:8.3f} h  FTF ρ p95 {s.ftf_rho_p95:6.2f}  "
                          f"longest wait {_longest_wait_h(r):7.2f} h  done {s.succeeded:4d}  "
                          f"({time.perf_counter() - t0:.0f} s)", flush=True)
                gavel = {p: r for p, r in results.items() if p in gavel_names}
                if not gavel or "hetero_pack" not in results:
                    continue
                best = min(gavel, key=lambda p: gavel[p].summary.avg_jct_s)
                ours = results["hetero_pack"].summary
                ref = gavel[best].summary
                plain = results.get("hetero_gittins")
                gittins = f"{plain.summary.avg_jct_s / 3600:.2f}" if plain else "-"
                rows.append(
                    f"| {load:g} | {seed} | {ours.avg_jct_s / 3600:.2f} | {gittins} | "
                    f"{gavel_names[best]} {ref.avg_jct_s / 3600:.2f} | "
                    f"**{ours.avg_jct_s / ref.avg_jct_s:.3f}** | "
                    f"{ours.ftf_rho_p95:.2f} / {ref.ftf_rho_p95:.2f} | "
                    f"{_longest_wait_h(results['hetero_pack']):.1f} / "
                    f"{_longest_wait_h(gavel[best]):.1f} |"
                )
                print("  row: " + rows[-1], flush=True)
    print("\n| jobs/h | seed | hetero_pack avg JCT h | hetero_gittins h | best Gavel policy (h) "
          "| ratio | FTF ρ p95 ours / best | longest wait h ours / best |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
