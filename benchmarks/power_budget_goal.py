"""The power-budget goal table (issue 34, part 3a): loads × seeds × policies.

For each (load, seed, policy) a Gavel-like synthetic workload runs three times on a
V100/P100/K80 cluster (4 GPUs a node):

* **uncapped** -- no budget (its ``peak_power_kw``, from the run's energy summary);
* **flow** -- ``--power-budget-kw`` at 80 % of that peak, per-job limits (ours; with
  ``--ours exact`` the same choice solved exactly, :mod:`tessera.sched.core.power_exact`);
* **uniform** -- the same budget kept by one limit on every GPU (the baseline).

Prints avg JCT over uncapped for flow and uniform, each run's peak power (the energy summary's
``peak_power_kw``, which books capped jobs at their capped draw), and the mean over seeds per
(load, policy). Beside each row: **bound**, the lower bound on the average JCT any scheduler
can reach under the budget (:func:`tessera.sim.power_bound.jct_lower_bound`) over the
uncapped JCT -- above 1.10 the goal is unreachable under the model; **floor**, the same bound
over the bound without a budget (how much the budget alone raises the floor); and **bind**,
the share of the uncapped run during which it drew more than the budget.
Goals: flow ≤ 1.10× uncapped, and flow < uniform. The power model is
:func:`tessera.perf.power_estimate.default_power_model` (Zeus's rows where Zeus measured the
job and GPU, the fitted estimate elsewhere).

    .venv/bin/python benchmarks/power_budget_goal.py [--jobs 300] [--loads 3,6,12]
        [--seeds 1,2,3] [--policies fifo,las] [--ours flow|exact]
"""

from __future__ import annotations

import argparse
import statistics

from tessera.model.cluster import load_cluster
from tessera.perf.power_estimate import default_power_model
from tessera.perf.profiles import default_throughputs
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.power_bound import binding_fraction, jct_lower_bound
from tessera.workload.synth import generate_gavel_like

CLUSTER = "v100:16,p100:16,k80:16"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--loads", default="3,6,12", help="jobs per hour")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--policies", default="fifo,las")
    ap.add_argument("--share", type=float, default=0.8, help="budget / uncapped peak")
    ap.add_argument("--ours", default="flow", choices=("flow", "exact"),
                    help="the stage's mode for ours: flow (the greedy) or exact")
    ap.add_argument("--wait-fast", action="store_true",
                    help="ours: a start on a far slower board waits for a fast one")
    args = ap.parse_args()
    cluster = load_cluster(CLUSTER, 4)
    model, tputs = default_power_model(), default_throughputs()
    print(f"cluster {CLUSTER} (4 GPUs a node), {args.jobs} jobs, budget {args.share:.0%} of "
          "the uncapped peak")
    print(f"{'jobs/h':>6} {'policy':<8} {'seed':>4} {'uncapped JCT h':>14} {'peak kW':>8} "
          f"{'flow':>6} {'uniform':>8} {'flow peak':>9} {'bound':>6} {'floor':>6} {'bind':>5}")
    table: dict[tuple[float, str], list[tuple[float, ...]]] = {}
    for load in (float(x) for x in args.loads.split(",")):
        for pol in args.policies.split(","):
            for seed in (int(x) for x in args.seeds.split(",")):
                wl = generate_gavel_like(args.jobs, load, seed=seed)
                free = simulate(wl, cluster, pol, SimConfig(seed=seed))
                assert free.energy is not None
                peak_kw = free.energy.peak_power_kw
                budget_kw = args.share * peak_kw
                ratios = []
                flow_peak = 0.0
                for mode in (args.ours, "uniform"):
                    r = simulate(wl, cluster, pol, SimConfig(
                        seed=seed, power_budget_kw=budget_kw, power_capping=mode,
                        power_wait_fast=args.wait_fast and mode != "uniform"))
                    ratios.append(r.summary.avg_jct_s / free.summary.avg_jct_s)
                    if mode == args.ours and r.energy is not None:
                        flow_peak = r.energy.peak_power_kw
                lb = jct_lower_bound(wl.jobs, cluster, model, tputs, budget_kw * 1e3)
                lb_free = jct_lower_bound(wl.jobs, cluster, model, tputs, None)
                e = free.energy
                bind = binding_fraction(list(e.times_s), list(e.power_w), e.end_s,
                                        budget_kw * 1e3)
                bound = lb.avg_jct_s / free.summary.avg_jct_s
                floor = lb.avg_jct_s / lb_free.avg_jct_s
                table.setdefault((load, pol), []).append((ratios[0], ratios[1], bound, floor,
                                                          bind))
                print(f"{load:6g} {pol:<8} {seed:4d} {free.summary.avg_jct_s / 3600:14.1f} "
                      f"{peak_kw:8.2f} {ratios[0]:6.3f} {ratios[1]:8.3f} "
                      f"{flow_peak:6.2f}/{budget_kw:.2f} {bound:6.3f} {floor:6.3f} {bind:5.2f}",
                      flush=True)
    print("\nmean over seeds (avg JCT / uncapped):")
    print(f"{'jobs/h':>6} {'policy':<8} {'flow':>6} {'uniform':>8} {'bound':>6} {'floor':>6} "
          f"{'bind':>5} {'≤1.10':>6} {'<uniform':>8} {'reachable':>9}")
    for (load, pol), rows in table.items():
        f, u, b, fl, bi = (statistics.mean(r[i] for r in rows) for i in range(5))
        print(f"{load:6g} {pol:<8} {f:6.3f} {u:8.3f} {b:6.3f} {fl:6.3f} {bi:5.2f} "
              f"{'yes' if f <= 1.10 else 'NO':>6} {'yes' if f < u else 'NO':>8} "
              f"{'yes' if b <= 1.10 else 'NO':>9}")


if __name__ == "__main__":
    main()
