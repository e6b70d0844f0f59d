"""Space sharing: ``hetero_pack`` against every Gavel policy under ``--compat gavel``.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_packing.py [--jobs 100]
        [--loads 12,6,2] [--seeds 0,1,2] [--policies ...] [--solver auto] [--oracle]
        [--oracle-short-first 0.1]
    PYTHONPATH=src .venv/bin/python benchmarks/bench_packing.py --philly
        [--philly-cluster v100:256,p100:128,k80:64] [--philly-limit N] [--policies ...]

For each load (jobs per hour) and seed it draws a one-GPU Gavel-like trace with
:func:`tessera.workload.generate_gavel_like` (Gavel's packed max-min LP cannot run traces with
mixed gang sizes: its row reshape fails), writes it as a Gavel TSV, reads the file back, and
simulates every policy on ``v100:12,p100:12,k80:12`` (one GPU per server) with Gavel's loop and
costs. Gavel's policies run as their compat twins, which reproduce Gavel's simulator on the same
file (``benchmarks/bench_gavel_agreement.py``). It prints, per trace, the average JCT of every
policy, then ``hetero_pack`` / the best Gavel policy, and fairness beside it: the 95th
percentile of the finish-time-fairness ρ and the longest wait before a first start.

Two reference columns bound what any policy can reach on a trace: ``no-wait bound`` is the
mean over jobs of each job's run time alone on its fastest GPU (no policy, packed or not, can
beat it: a pair runs each job at most at its own speed), and ``--oracle`` adds
``oracle_pack``, ``hetero_pack`` ordered by true remaining work (``hetero_srpt``'s oracle) --
an upper bound on what better ordering alone would give; it is not a Tessera policy.
``--oracle-short-first α`` gives ``oracle_pack`` short-first weights from the true remaining
time too (``hetero_pack``'s ``short_first``, fed the oracle's hours): the most the design gains
from knowing every job's size (docs/scheduler.md, "Even with the sizes").

``--philly`` runs the bundled Philly week instead, with Tessera's own costs (30 + 30 s
checkpoint/restore, consolidation; each policy's own cadence) on ``--philly-cluster``: the
non-packed policies, Gavel's packing twins (in Tessera's round driver, :mod:`tessera.sim.
sharing`), ``hetero_gittins`` and ``hetero_pack``, with the pairs formed and CPU seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.model.jobs import Workload
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Placement
from tessera.sched.policies.hetero_pack import HeteroPack, HeteroPackConfig
from tessera.sched.policies.hetero_srpt import HeteroSrpt
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator, simulate
from tessera.sim.metrics import SimResult
from tessera.sim.sharing import SharingWorld
from tessera.sim.state import SimJob
from tessera.workload import generate_gavel_like, load_trace, read_trace, write_gavel_tsv

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
PHILLY = ("fifo", "las", "max_min_fairness", "finish_time_fairness", "hetero_gittins",
          "fifo_packed", "max_min_fairness_packed", "gandiva", "hetero_pack")


class OraclePack(HeteroPack):
    """``hetero_pack`` ordered by true remaining work: the upper bound of ``--oracle``."""

    _remaining_best_s = HeteroSrpt._remaining_best_s


def _no_wait_bound_h(workload: Workload, cluster: ClusterSpec) -> float:
    """Mean over jobs of the run time alone on the fastest GPU (hours)."""
    oracle = ThroughputOracle(default_throughputs(), cluster)
    d = [j.total_steps / max(r.consolidated for r in oracle.rates(j)) for j in workload.jobs]
    return sum(d) / len(d) / 3600


def _philly(args: argparse.Namespace) -> int:
    """The Philly week with Tessera's own costs (see the module docstring)."""
    table = default_throughputs()
    limit = args.philly_limit if args.philly_limit > 0 else None
    wl = read_trace("philly", limit=limit, throughputs=table).workload
    cluster = load_cluster(args.philly_cluster, 8)
    wanted = ([p.strip() for p in args.policies.split(",") if p.strip()]
              if args.policies != ",".join([p for p, _ in GAVEL] + list(OURS)) else PHILLY)
    print(f"Philly week, {len(wl.jobs)} jobs, {cluster.describe()}; Tessera's costs")
    print("| policy | avg JCT h | FTF ρ p95 | longest wait h | pairs formed | preemptions "
          "| CPU s | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for pol in wanted:
        t0, c0 = time.perf_counter(), time.process_time()
        sim = Simulator(wl, cluster, make_policy(pol), SimConfig(), table)
        world = sim.world
        pairs = [0]
        if isinstance(world, SharingWorld):
            start = world.start

            def counting(job: SimJob, p: Placement, t_s: float, start: Any = start,
                         world: SharingWorld = world, pairs: list[int] = pairs) -> None:
                start(job, p, t_s)
                pairs[0] += job.idx in world.guests

            world.start = counting  # type: ignore[method-assign]
        r = sim.run()
        s = r.summary
        print(f"| {pol} | {s.avg_jct_s / 3600:.3f} | {s.ftf_rho_p95:.2f} | "
              f"{_longest_wait_h(r):.1f} | {pairs[0]} | {s.preemptions} | "
              f"{time.process_time() - c0:.0f} | {time.perf_counter() - t0:.0f} |", flush=True)
    return 0


def _longest_wait_h(r: SimResult) -> float:
    return max((j.queue_delay_s or 0.0 for j in r.jobs), default=0.0) / 3600


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--loads", default="12,6,2", help="jobs per hour, comma list")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--policies", default=",".join([p for p, _ in GAVEL] + list(OURS)))
    ap.add_argument("--solver", default="auto", help="ecos | highs-ipm | highs | auto")
    ap.add_argument("--oracle", action="store_true",
                    help="add oracle_pack (true remaining work), an upper bound, not a policy")
    ap.add_argument("--oracle-short-first", type=float, default=0.0, metavar="ALPHA",
                    help="oracle_pack weighs each job's progress by (true hours left)^-ALPHA "
                    "(hetero_pack's short_first with the oracle's sizes; default 0: off)")
    ap.add_argument("--philly", action="store_true",
                    help="the Philly week with Tessera's own costs instead")
    ap.add_argument("--philly-cluster", default="v100:256,p100:128,k80:64")
    ap.add_argument("--philly-limit", type=int, default=0, help="first N jobs (0: all)")
    args = ap.parse_args(argv)
    if args.philly:
        return _philly(args)
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
                bound = _no_wait_bound_h(workload, cluster)
                print(f"  load {load:g}/h seed {seed} no-wait bound {bound:.3f} h", flush=True)
                for pol in wanted + (["oracle_pack"] if args.oracle else []):
                    t0, c0 = time.perf_counter(), time.process_time()
                    cfg = SimConfig(compat="gavel", compat_solver=args.solver)  # type: ignore[arg-type]
                    oracle_cfg = HeteroPackConfig(short_first=args.oracle_short_first)
                    policy = (OraclePack(oracle_cfg, name="oracle_pack")
                              if pol == "oracle_pack" else make_policy(pol))
                    r = simulate(workload, cluster, policy, cfg)
                    results[pol] = r
                    s = r.summary
                    print(f"  load {load:g}/h seed {seed} {pol:30} avg JCT "
                          f"{s.avg_jct_s / 3600:8.3f} h  FTF ρ p95 {s.ftf_rho_p95:6.2f}  "
                          f"longest wait {_longest_wait_h(r):7.2f} h  done {s.succeeded:4d}  "
                          f"({time.process_time() - c0:.0f} s CPU, "
                          f"{time.perf_counter() - t0:.0f} s wall)", flush=True)
                gavel = {p: r for p, r in results.items() if p in gavel_names}
                if not gavel or "hetero_pack" not in results:
                    continue
                best = min(gavel, key=lambda p: gavel[p].summary.avg_jct_s)
                ours = results["hetero_pack"].summary
                ref = gavel[best].summary
                plain = results.get("hetero_gittins")
                gittins = f"{plain.summary.avg_jct_s / 3600:.2f}" if plain else "-"
                orc = results.get("oracle_pack")
                upper = f"{orc.summary.avg_jct_s / ref.avg_jct_s:.3f}" if orc else "-"
                rows.append(
                    f"| {args.jobs} | {load:g} | {seed} | {ours.avg_jct_s / 3600:.2f} | "
                    f"{gittins} | "
                    f"{gavel_names[best]} {ref.avg_jct_s / 3600:.2f} | "
                    f"**{ours.avg_jct_s / ref.avg_jct_s:.3f}** | "
                    f"{ours.ftf_rho_p95:.2f} / {ref.ftf_rho_p95:.2f} | "
                    f"{_longest_wait_h(results['hetero_pack']):.1f} / "
                    f"{_longest_wait_h(gavel[best]):.1f} | {bound:.2f} | {upper} |"
                )
                print("  row: " + rows[-1], flush=True)
    print("\n| jobs | jobs/h | seed | hetero_pack avg JCT h | hetero_gittins h | best Gavel "
          "policy (h) | ratio | FTF ρ p95 ours / best | longest wait h ours / best "
          "| no-wait bound h | oracle_pack ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
