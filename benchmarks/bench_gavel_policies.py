"""Per-decision time of the Gavel allocation policies against the number of active jobs.

For each size N, builds the ``bench_decide`` snapshot (Gavel job types, gang sizes 1/2/4/8 in
Gavel's 70/10/15/5 mix, V100/P100/K80 cluster scaled with N) and times ``policy.rank`` with the
shares recomputed every time (no cached state), the LP solver passed in the context as the core
does (one :class:`~tessera.sched.core.lp.LpSolver` reused across decisions). Prints the median and
max over repeats, and the objective reached (max-min: the minimum normalised rate; finish-time
fairness: the worst ρ), so a faster solve that answers worse would show.

Target (issue 10): finish_time_fairness <= 200 ms per decision at 2,048 jobs (was ~1.4 s).
Variants side by side in one run: ``finish_time_fairness`` (the default: warm search, then the
``settle`` LP), ``+cold`` (``warm_start=False``: the old default search, plus the settle LP),
``+vertex`` (warm, ``settle="none"``: the search alone, returning the solver's vertex).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_gavel_policies.py [--sizes 256,1024,2048]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np

from bench_decide import build
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.lp import LpSolver
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import PolicyContext
from tessera.sched.gavel import RoundState


def objective(name: str, ctx: PolicyContext, state: RoundState) -> str:
    """The quality of the shares: min normalised rate (max-min) or worst ρ (FTF)."""
    snap, x = ctx.snapshot, state.shares.x
    from tessera.sched.gavel import Backend
    from tessera.sched.gavel.lp_policy import _agnostic_share, build_problem

    p = build_problem(ctx)
    x_iso, _ = _agnostic_share(p, Backend(LpSolver()))
    thr_iso = (p.tput * x_iso).sum(axis=1)
    thr = (p.tput * x).sum(axis=1)
    live = thr_iso > 0
    if name.startswith("finish_time"):
        t = np.array([max(snap.now_s - j.spec.submit_time_s, 0.0) for j in snap.jobs])
        r = np.array([j.remaining_at(snap.now_s) for j in snap.jobs])
        d = t + r / np.where(live, thr_iso, 1.0)
        rho = (t + r / np.where(thr > 0, thr, np.nan)) / d
        return f"worst ρ {np.nanmax(np.where(live, rho, np.nan)):.5f}"
    rate = p.scale * thr / (p.weight * np.where(live, thr_iso, 1.0))
    return f"min rate {rate[live].min():.5f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024,2048")
    ap.add_argument("--policies", default="max_min_fairness,finish_time_fairness,"
                    "finish_time_fairness+cold,finish_time_fairness+vertex",
                    help="policy names; finish_time_fairness+cold / +vertex: see above")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'policy':<22}{'jobs':>6}{'GPUs':>7}{'median ms':>11}{'max ms':>9}  objective")
    for name in args.policies.split(","):
        base, _, variant = name.partition("+")
        config = {"cold": {"warm_start": False}, "vertex": {"settle": "none"}}.get(variant)
        policy = make_policy(base, config)
        for n in sizes:
            snap = build(n)
            oracle = ThroughputOracle(default_throughputs(), snap.cluster)
            ctx = PolicyContext(snap, oracle, random.Random(0), solver=LpSolver())
            times = []
            ranking = None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                ranking = policy.rank(ctx)
                times.append((time.perf_counter() - t0) * 1e3)
            assert ranking is not None and isinstance(ranking.state, RoundState)
            print(f"{name:<22}{n:>6}{snap.cluster.total_gpus:>7}"
                  f"{statistics.median(times):>11.1f}{max(times):>9.1f}  "
                  f"{objective(name, ctx, ranking.state)}"
                  + (f"  fallbacks: {'; '.join(ranking.fallbacks)}" if ranking.fallbacks else ""),
                  flush=True)


if __name__ == "__main__":
    main()
