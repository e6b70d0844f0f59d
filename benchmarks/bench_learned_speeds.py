"""What not knowing a job's speed costs: average JCT with the table's speeds and learned ones.

For each trace and policy, runs the simulator twice, ``speeds="table"`` (policies read the
throughput table) and ``speeds="learned"`` (they read :mod:`tessera.sched.core.learned`'s
estimates; the table still drives progress), and prints one JSON line per pair: both average
JCTs, their ratio and the run's note on the estimates' error. The traces of
``docs/scheduler.md`` ("Learned speeds"):

* ``gavel``: Gavel-like heavy load (200 one-GPU jobs, 20 per hour, seeds 0 and 1) on
  ``v100:12,p100:12,k80:12`` under ``--compat gavel``;
* ``sia``: Sia's Philly workloads 1 and 2 (2 needs the public data) on ``sia-64`` with Sia's
  table.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_learned_speeds.py [--setting gavel]

About 15 minutes for everything on one core (``finish_time_fairness`` under ``--compat
gavel`` takes two of them per run).
"""

from __future__ import annotations

import argparse
import json
import time

from tessera.model.cluster import load_cluster
from tessera.model.jobs import Workload
from tessera.perf.tables import load_throughputs
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import generate_gavel_like, read_trace

GAVEL_POLICIES = "max_min_fairness,finish_time_fairness,hetero_srpt,hetero_gittins"
SIA_POLICIES = "hetero_srpt,las,max_min_fairness,finish_time_fairness,hetero_gittins"


def compare(setting: str, name: str, workload: Workload, policies: str) -> None:
    """Print one JSON line per policy: table against learned speeds."""
    if setting == "gavel":
        table, compat = load_throughputs("gavel"), "gavel"
        cluster = load_cluster("v100:12,p100:12,k80:12", 1)
    else:
        table, compat = load_throughputs("sia"), None
        cluster = load_cluster("sia-64", 8)
    for policy in policies.split(","):
        row: dict[str, object] = {"trace": name, "policy": policy}
        jct_h = {}
        for speeds in ("table", "learned"):
            t0 = time.perf_counter()
            cfg = SimConfig(seed=0, speeds=speeds, compat=compat)  # type: ignore[arg-type]
            r = simulate(workload, cluster, policy, cfg, table)
            jct_h[speeds] = r.summary.avg_jct_s / 3600
            row[f"{speeds}_jct_h"] = round(jct_h[speeds], 3)
            row[f"{speeds}_wall_s"] = round(time.perf_counter() - t0, 1)
            row["note"] = [n for n in r.notes if "learned" in n]
        row["ratio"] = round(jct_h["learned"] / jct_h["table"], 3)
        print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--setting", choices=("gavel", "sia", "both"), default="both")
    args = ap.parse_args()
    if args.setting in ("gavel", "both"):
        for seed in (0, 1):
            w = generate_gavel_like(200, 20.0, seed)
            compare("gavel", f"gavel heavy, seed {seed}", w, GAVEL_POLICIES)
    if args.setting in ("sia", "both"):
        for trace in ("sia-philly-1", "sia-philly-2"):
            w = read_trace(trace, throughputs=load_throughputs("sia")).workload
            compare("sia", trace, w, SIA_POLICIES)


if __name__ == "__main__":
    main()
