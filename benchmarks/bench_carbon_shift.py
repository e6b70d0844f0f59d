"""Carbon-aware shifting (issue 34, 3c): ours against GAIA's Carbon-Time and Wait-Awhile.

For each region, load (jobs per day) and seed: a month of jobs starting on a random day of
2020 (lengths 30 min to 12 h, 1-8 GPUs, V100, each with ``--slack-h`` hours of slack), run
under the agnostic policy, Carbon-Time and Wait-Awhile; then ``carbon-price`` (ours) with its
price set so that its average wait is at most each baseline's (``match_wait``), and the
carbon it saves against that baseline. Beside each cut: "priced", the schedule at one price per
job-hour of waiting with a power limit per slot (``sim/carbon_frontier.py``), and "best", the
lower bound on the carbon of *any* schedule at the baseline's average wait (Lagrangian bound,
``sim/carbon_frontier.py``; ``--lp`` adds the LP relaxation's bound, ``sim/carbon_bound.py``,
slow: about 10-150 s per row). A goal above "best" is unreachable under the power model.
Prints a markdown table (docs/energy.md quotes it).
Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_carbon_shift.py [--seeds 3]

Needs the carbon traces in the data folder (../shared/data/carbon or $TESSERA_DATA_DIR).
"""

from __future__ import annotations

import argparse
import random
import statistics

from tessera.model.gpus import resolve_flavor
from tessera.sim.carbon_bound import carbon_lower_bound
from tessera.sim.carbon_frontier import bound_and_schedule, study_frontier
from tessera.sim.carbon_shift import ShiftJob, match_wait, run_shift
from tessera.workload.carbon import load_carbon

LENGTHS_S = (1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0)
GPUS = (1, 2, 4, 8)


def workload(seed: int, jobs_per_day: int, days: int, slack_h: float) -> list[ShiftJob]:
    """A month of jobs from a random day of the year (Poisson arrivals)."""
    rng = random.Random(seed)
    start = rng.randrange(0, 300) * 86400.0
    t, out = start, []
    while t < start + days * 86400.0:
        t += rng.expovariate(jobs_per_day / 86400.0)
        out.append(ShiftJob(f"j{len(out)}", t, rng.choice(LENGTHS_S), rng.choice(GPUS),
                            max_delay_s=slack_h * 3600.0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--regions", default="gb,de,fr")
    ap.add_argument("--loads", default="20,80")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--slack-h", type=float, default=24.0)
    ap.add_argument("--slot-limits", action="store_true",
                    help="ours: a power limit per slot (sim/carbon_slot_limits.py) instead of "
                         "one per job")
    ap.add_argument("--lp", action="store_true",
                    help="also the LP relaxation's bound (slow; the Lagrangian one is tighter)")
    args = ap.parse_args()
    v100 = resolve_flavor("v100")
    lp = " (LP)" if args.lp else ""
    print("| region | jobs/day | seed | agnostic kg | Carbon-Time kg (wait h) | ours kg (wait h) "
          f"| ours vs CT | priced vs CT | best vs CT{lp} | Wait-Awhile kg (wait h) "
          f"| ours kg (wait h) | ours vs WA | priced vs WA | best vs WA{lp} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cuts: dict[str, list[float]] = {k: [] for k in ("ct", "wa", "ct-p", "wa-p", "ct-b", "wa-b")}
    for region in args.regions.split(","):
        trace = load_carbon(region)
        for load in map(int, args.loads.split(",")):
            for seed in range(args.seeds):
                jobs = workload(seed, load, args.days, args.slack_h)
                agn = run_shift(jobs, trace, "agnostic", v100)
                row = [region, str(load), str(seed), f"{agn.carbon_kg:,.1f}"]
                front = study_frontier(jobs, trace, v100)
                for key, name in (("ct", "carbon-time"), ("wa", "wait-awhile")):
                    base = run_shift(jobs, trace, name, v100)
                    ours = match_wait(jobs, trace, v100, base.avg_wait_s,
                                      slot_limits=args.slot_limits)
                    best, priced = bound_and_schedule(front, base.avg_wait_s)
                    assert priced.avg_wait_s <= base.avg_wait_s + 1e-6
                    cut = 1 - ours.carbon_kg / base.carbon_kg
                    cut_p = 1 - priced.carbon_kg / base.carbon_kg
                    cut_b = 1 - best.carbon_kg / base.carbon_kg
                    cuts[key].append(cut)
                    cuts[key + "-p"].append(cut_p)
                    cuts[key + "-b"].append(cut_b)
                    b_txt = f"{100 * cut_b:.1f} %"
                    if args.lp:
                        lp_kg = carbon_lower_bound(jobs, trace, v100, base.avg_wait_s).carbon_kg
                        b_txt += f" ({100 * (1 - lp_kg / base.carbon_kg):.1f} %)"
                    row += [f"{base.carbon_kg:,.1f} ({base.avg_wait_s / 3600:.1f})",
                            f"{ours.carbon_kg:,.1f} ({ours.avg_wait_s / 3600:.1f})",
                            f"{100 * cut:.1f} %", f"{100 * cut_p:.1f} %", b_txt]
                print("| " + " | ".join(row) + " |", flush=True)
    print()
    for key, name in (("ct", "Carbon-Time"), ("wa", "Wait-Awhile")):
        for suffix, who in (("", "ours"), ("-p", "priced"), ("-b", "best possible")):
            c = cuts[key + suffix]
            print(f"* {who} vs {name}: mean {100 * statistics.mean(c):.1f} %, "
                  f"min {100 * min(c):.1f} %, max {100 * max(c):.1f} % less carbon")


if __name__ == "__main__":
    main()
