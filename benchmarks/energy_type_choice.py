"""Energy-aware GPU-type choice against per-job Zeus (issue 34, part 3b): loads × seeds.

A Gavel-like synthetic workload on a mixed V100/P100/K80 cluster (4 GPUs a node) runs twice
per (load, seed, policy), both with per-job Zeus power limits at η (each job at the limit
minimising η·energy + (1 − η)·MAXPOWER·time on the type its policy chose):

* **zeus** -- the policy places as it always does (the baseline);
* **ours** -- the same policy, but each job is offered its types cheapest first by that cost
  and only those within ``1 + slack`` of its cheapest (``--energy-types``).

Prints Zeus's total cost over the jobs (MJ), the saving, the jobs' energy and the avg JCT
ratio, and the mean saving per (load, policy). Goal: saving ≥ 10 % at η = 0.5. The power
model is :func:`tessera.perf.power_estimate.default_power_model` (Zeus's rows where Zeus
measured the job and GPU, the fitted estimate elsewhere); the jobs' energy is the sum of the
result's per-job ``energy_kwh`` (capped draw while capped); per-job Zeus is this
repository's (:func:`tessera.sched.core.energy_choice.zeus_limits`), not the ``zeus``
package's optimiser.

    .venv/bin/python benchmarks/energy_type_choice.py [--jobs 300] [--loads 1,3,6]
        [--seeds 1,2,3] [--policies fifo,las] [--eta 0.5] [--slack 0.5]
"""

from __future__ import annotations

import argparse
import statistics

from tessera.model.cluster import load_cluster
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import SimResult
from tessera.workload.synth import generate_gavel_like

CLUSTER = "v100:16,p100:16,k80:16"


def _jobs_kwh(r: SimResult) -> float:
    """The jobs' energy (idle GPUs not counted), from the result's per-job ``energy_kwh``."""
    return sum(j.energy_kwh or 0.0 for j in r.jobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--loads", default="1,3,6", help="jobs per hour")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--policies", default="fifo,las")
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--slack", type=float, default=0.5)
    args = ap.parse_args()
    cluster = load_cluster(CLUSTER, 4)
    print(f"cluster {CLUSTER} (4 GPUs a node), {args.jobs} jobs, η = {args.eta}, "
          f"slack {args.slack}")
    print(f"{'jobs/h':>6} {'policy':<8} {'seed':>4} {'zeus MJ':>9} {'ours MJ':>9} "
          f"{'saving':>7} {'zeus kWh':>9} {'ours kWh':>9} {'JCT ratio':>9}")
    table: dict[tuple[float, str], list[tuple[float, float]]] = {}
    for load in (float(x) for x in args.loads.split(",")):
        for pol in args.policies.split(","):
            for seed in (int(x) for x in args.seeds.split(",")):
                wl = generate_gavel_like(args.jobs, load, seed=seed)
                z = simulate(wl, cluster, pol, SimConfig(seed=seed, zeus_eta=args.eta))
                o = simulate(wl, cluster, pol, SimConfig(
                    seed=seed, zeus_eta=args.eta, energy_types=True, energy_slack=args.slack))
                zc, oc = z.extras["zeus_cost_mj"], o.extras["zeus_cost_mj"]
                jct = o.summary.avg_jct_s / z.summary.avg_jct_s
                table.setdefault((load, pol), []).append((1 - oc / zc, jct))
                print(f"{load:6g} {pol:<8} {seed:4d} {zc:9.0f} {oc:9.0f} {1 - oc / zc:7.1%} "
                      f"{_jobs_kwh(z):9.0f} {_jobs_kwh(o):9.0f} "
                      f"{jct:9.3f}", flush=True)
    print("\nmean over seeds:")
    print(f"{'jobs/h':>6} {'policy':<8} {'saving':>7} {'JCT ratio':>9} {'≥10 %':>6}")
    for (load, pol), rows in table.items():
        s = statistics.mean(r[0] for r in rows)
        j = statistics.mean(r[1] for r in rows)
        print(f"{load:6g} {pol:<8} {s:7.1%} {j:9.3f} {'yes' if s >= 0.10 else 'NO':>6}")


if __name__ == "__main__":
    main()
