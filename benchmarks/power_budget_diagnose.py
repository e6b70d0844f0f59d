"""Per-job diagnosis of one power-budget goal run (issue 34, part 3a).

Runs one (load, seed, policy) of ``benchmarks/power_budget_goal.py`` uncapped and under the
budget (flow), and prints where the flow run's extra JCT comes from: the sum over jobs of the
JCT added, split into queueing (first start later) and running (first start to finish
longer, i.e. caps and preemptions), and the jobs that lose the most.

    .venv/bin/python benchmarks/power_budget_diagnose.py --load 0.5 --seed 1 --policy fifo
"""

from __future__ import annotations

import argparse

from tessera.model.cluster import load_cluster
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.sim.metrics import JobRecord
from tessera.workload.synth import generate_gavel_like

CLUSTER = "v100:16,p100:16,k80:16"


def _split(free: JobRecord, flow: JobRecord) -> tuple[float, float]:
    """(queueing, running) seconds ``flow`` added over ``free``."""
    assert free.first_start_s is not None and flow.first_start_s is not None
    assert free.finish_s is not None and flow.finish_s is not None
    q = flow.first_start_s - free.first_start_s
    run = (flow.finish_s - flow.first_start_s) - (free.finish_s - free.first_start_s)
    return q, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--load", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--share", type=float, default=0.8)
    ap.add_argument("--mode", default="flow")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--wait-fast", action="store_true",
                    help="the flow run waits for a fast board (--power-fast-boards)")
    args = ap.parse_args()
    cluster = load_cluster(CLUSTER, 4)
    wl = generate_gavel_like(args.jobs, args.load, seed=args.seed)
    free = simulate(wl, cluster, args.policy, SimConfig(seed=args.seed))
    assert free.energy is not None
    budget_kw = args.share * free.energy.peak_power_kw
    flow = simulate(wl, cluster, args.policy, SimConfig(
        seed=args.seed, power_budget_kw=budget_kw, power_capping=args.mode,
        power_wait_fast=args.wait_fast))
    by_id = {r.job_id: r for r in free.jobs}
    rows = []
    for r in flow.jobs:
        f = by_id[r.job_id]
        if r.jct_s is None or f.jct_s is None:
            continue
        q, run = _split(f, r)
        rows.append((r.jct_s - f.jct_s, q, run, f, r))
    n = len(rows)
    tot = sum(x[0] for x in rows)
    print(f"load {args.load} seed {args.seed} {args.policy}: flow/uncapped "
          f"{flow.summary.avg_jct_s / free.summary.avg_jct_s:.3f}, budget {budget_kw:.2f} kW, "
          f"{n} jobs, added JCT {tot / n / 3600:+.2f} h/job = queueing "
          f"{sum(x[1] for x in rows) / n / 3600:+.2f} + running "
          f"{sum(x[2] for x in rows) / n / 3600:+.2f}; power-held jobs "
          f"{sum(1 for x in rows if 'power' in x[4].reason)}")
    pos = [x for x in rows if x[0] > 0]
    print(f"jobs slower {len(pos)} (+{sum(x[0] for x in pos) / 3600:.1f} h), faster "
          f"{n - len(pos)} ({sum(x[0] for x in rows if x[0] <= 0) / 3600:.1f} h)")
    print(f"{'job':>8} {'gpus':>4} {'type':<28} {'free run h':>10} {'+JCT h':>7} "
          f"{'+queue h':>8} {'+run h':>7} {'run×':>5} {'free wait h':>11}  flavors free -> flow")
    for d, q, run, f, r in sorted(rows, key=lambda x: -x[0])[:args.top]:
        assert f.finish_s is not None and f.first_start_s is not None
        fr = f.finish_s - f.first_start_s
        print(f"{r.job_id:>8} {r.num_gpus:4d} {r.job_type[:28]:<28} {fr / 3600:10.2f} "
              f"{d / 3600:+7.2f} {q / 3600:+8.2f} {run / 3600:+7.2f} "
              f"{(fr + run) / fr if fr > 0 else 1:5.2f} {(f.queue_delay_s or 0) / 3600:11.2f}  "
              f"{f.gpu_s_by_flavor} -> {r.gpu_s_by_flavor}")


if __name__ == "__main__":
    main()
