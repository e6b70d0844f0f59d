"""What not knowing a job's speed costs: average JCT with the table's speeds and learned ones.

For each trace and policy, runs the simulator with ``speeds="table"`` (policies read the
throughput table), ``speeds="learned"`` (they read :mod:`tessera.sched.core.learned`'s
estimates; the table still drives progress) and ``learned`` with Sia's bootstrap
(``bootstrap_s``: a profile on one GPU of each flavor first, :mod:`tessera.sim.bootstrap`)
in each of its modes: ``bootstrap`` (serial, Sia's paper), ``lean`` (one idle GPU of each
flavor at once, never waiting, a 1-GPU job's profile trains it) and ``free`` (every
profile's result at arrival, at no cost: the bound of 1-GPU profiles) and ``oracle`` (the
job's own gang measured on every flavor at arrival: no estimate error at all); ``--runs``
picks some. Prints one JSON line per policy: the average JCTs, the learned runs' ratios to
the table's, their bootstrap GPU-hours and their notes on the estimates' error. The traces
of ``docs/scheduler.md`` ("Learned speeds"):

* ``gavel``: Gavel-like heavy load (200 one-GPU jobs, 20 per hour, seeds 0 and 1) on
  ``v100:12,p100:12,k80:12`` under ``--compat gavel``;
* ``sia``: Sia's Philly workloads 1 and 2 (2 needs the public data) on ``sia-64`` with Sia's
  table.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_learned_speeds.py [--setting gavel] \
        [--bootstrap-s 300] [--policies hetero_srpt] [--runs table,learned,lean,free] \
        [--options settle=none] [--noise 0.01 --draws 5]

``--noise 0.01`` is the 1 % speed-error experiment of ``docs/scheduler.md`` ("max-min
fairness's second stage"); ``--options`` passes policy options (``max_min_fairness``'s
``settle=none`` is the policy before its second stage).

About 40 minutes for everything on one core (``finish_time_fairness`` under ``--compat
gavel`` takes two of them per run).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field

from tessera.model.cluster import load_cluster
from tessera.model.jobs import Workload
from tessera.perf.tables import load_throughputs
from tessera.sched.catalog import make_policy
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload import generate_gavel_like, read_trace

GAVEL_POLICIES = "max_min_fairness,finish_time_fairness,hetero_srpt,hetero_gittins"
SIA_POLICIES = "hetero_srpt,las,max_min_fairness,finish_time_fairness,hetero_gittins"


#: The runs per policy: label -> (speeds, bootstrap mode or ``None`` for no profiles).
RUNS: dict[str, tuple[str, str | None]] = {
    "table": ("table", None), "learned": ("learned", None),
    "bootstrap": ("learned", "serial"), "lean": ("learned", "lean"),
    "free": ("learned", "free"), "oracle": ("learned", "oracle"),
}


@dataclass(frozen=True)
class Extra:
    """What else to run beside ``--runs``: the policies' options (``settle=none``) and the
    speed-error experiment (``noise`` > 0: ``draws`` runs in which the policies see the truth
    times ``exp(noise · z)``, ``z`` standard normal per job, flavor and gang size, seeded by
    the draw: the ``oracle`` bound with ``--measurement-noise``)."""

    options: dict[str, str] = field(default_factory=dict)
    noise: float = 0.0
    draws: int = 5
    gavel_compat: bool = True


def compare(setting: str, name: str, workload: Workload, policies: str,
            bootstrap_s: float, runs: list[str], extra: Extra | None = None) -> None:
    """Print one JSON line per policy: the table's speeds against learned ones, without
    profiles, with Sia's serial bootstrap, the lean one and the free bound (those of
    ``runs``; every ratio is to ``table``'s JCT, when it runs), and the noise draws of
    ``extra``."""
    extra = extra or Extra()
    if setting == "gavel":
        table, compat = load_throughputs("gavel"), "gavel" if extra.gavel_compat else None
        cluster = load_cluster("v100:12,p100:12,k80:12", 1)
    else:
        table, compat = load_throughputs("sia"), None
        cluster = load_cluster("sia-64", 8)
    for policy in policies.split(","):
        row: dict[str, object] = {"trace": name, "policy": policy}
        jct_h = {}
        for label in runs:
            speeds, mode = RUNS[label]
            t0 = time.perf_counter()
            cfg = SimConfig(seed=0, speeds=speeds, compat=compat,
                            bootstrap_s=bootstrap_s if mode else None,
                            bootstrap_mode=mode or "serial")
            r = simulate(workload, cluster, make_policy(policy, extra.options), cfg, table)
            jct_h[label] = r.summary.avg_jct_s / 3600
            row[f"{label}_jct_h"] = round(jct_h[label], 3)
            row[f"{label}_wall_s"] = round(time.perf_counter() - t0, 1)
            if speeds == "learned":
                row[f"{label}_note"] = [n for n in r.notes if "learned" in n]
                row[f"{label}_unfinished"] = r.summary.unfinished
            if mode:
                row[f"{label}_gpu_h"] = round(r.extras.get("bootstrap_gpu_h", 0.0), 2)
        if extra.noise > 0:
            noisy = []
            for draw in range(extra.draws):
                cfg = SimConfig(seed=draw, speeds="learned", compat=compat,
                                bootstrap_s=bootstrap_s, bootstrap_mode="oracle",
                                measurement_noise=extra.noise)
                r = simulate(workload, cluster, make_policy(policy, extra.options), cfg, table)
                noisy.append(r.summary.avg_jct_s / 3600)
            row["noise"] = extra.noise
            row["noise_jct_h"] = [round(h, 3) for h in noisy]
            if "table" in jct_h:
                ratios = [h / jct_h["table"] for h in noisy]
                row["noise_ratios"] = [round(x, 3) for x in ratios]
                row["noise_ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
        if extra.options:
            row["options"] = extra.options
        if setting == "gavel" and not extra.gavel_compat:
            row["compat"] = "none"
        row["bootstrap_s"] = bootstrap_s
        for label in jct_h:
            if label != "table" and "table" in jct_h:
                row[f"{label}_ratio"] = round(jct_h[label] / jct_h["table"], 3)
        print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--setting", choices=("gavel", "sia", "both"), default="both")
    ap.add_argument("--bootstrap-s", type=float, default=300.0,
                    help="length of each bootstrap profile (s)")
    ap.add_argument("--policies", default=None, help="comma-separated (default: the table's)")
    ap.add_argument("--seeds", default="0,1", help="Gavel-like trace seeds")
    ap.add_argument("--traces", default="sia-philly-1,sia-philly-2", help="Sia's workloads")
    ap.add_argument("--runs", default="table,learned,bootstrap,lean,free",
                    help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--options", default="",
                    help="policy options for every policy, e.g. settle=none (k=v,k=v)")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="also run --draws draws with the truth times exp(noise·z) (0: none)")
    ap.add_argument("--draws", type=int, default=5, help="noise draws (seeds 0..draws-1)")
    ap.add_argument("--no-compat", action="store_true",
                    help="run the gavel setting without --compat gavel (Tessera's own policies)")
    args = ap.parse_args()
    pairs = [kv for kv in args.options.split(",") if kv]
    if bad := [kv for kv in pairs if "=" not in kv]:
        ap.error(f"--options: {', '.join(bad)} is not key=value")
    options = dict(kv.split("=", 1) for kv in pairs)
    extra = Extra(options, args.noise, args.draws, not args.no_compat)
    runs = [r for r in args.runs.split(",") if r]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        ap.error(f"--runs: unknown {', '.join(unknown)} (known: {', '.join(RUNS)})")
    if args.setting in ("gavel", "both"):
        for seed in map(int, args.seeds.split(",")):
            w = generate_gavel_like(200, 20.0, seed)
            compare("gavel", f"gavel heavy, seed {seed}", w, args.policies or GAVEL_POLICIES,
                    args.bootstrap_s, runs, extra)
    if args.setting in ("sia", "both"):
        for trace in args.traces.split(","):
            w = read_trace(trace, throughputs=load_throughputs("sia")).workload
            compare("sia", trace, w, args.policies or SIA_POLICIES, args.bootstrap_s, runs,
                    extra)


if __name__ == "__main__":
    main()
