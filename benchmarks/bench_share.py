"""Benchmark of the MIG/MPS sharing planner (``tessera.share``); prints tables.

1. ParvaGPU's six A100-80GB scenarios: ParvaGPU's own GPU counts (its shipped deployment files)
   beside ours (exact ILP under ParvaGPU's rule, and under Tessera's default rule with 10 %
   headroom), the lower bound, predicted SLO violations (Poisson replay), and the GPUs a
   one-model-per-whole-GPU deployment needs.
2. Scale: 1,000 synthetic services planned by the heuristic (target: under 1 s, checked here
   rather than in tests/share/test_planner.py, where a busy machine failed it) and by the exact
   programme.

Run: ``PYTHONPATH=src python benchmarks/bench_share.py [--ilp-time-limit 60] [--services 1000]``
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from dataclasses import replace
from importlib import resources

import numpy as np

from tessera.share.mig import mig_gpu
from tessera.share.packing import plan_heuristic, plan_ilp, solve_ilp
from tessera.share.profiles import (
    PARVAGPU_RULE,
    BatchingRule,
    ProfileTable,
    Service,
    best_latency,
    load_parvagpu_profiles,
    parvagpu_scenario,
)
from tessera.share.segments import all_options
from tessera.share.serving_sim import poisson_streams, simulate

GPU = mig_gpu("A100-80GB")
HEURISTIC_TARGET_S = 1.0  # the 1 s target the planner test used to assert


def parvagpu_reference_gpus(scenario: int) -> int:
    path = resources.files("tessera.data").joinpath(
        f"parvagpu/deployment/SLO{scenario}_ParvaGPU_deploy.csv"
    )
    rows = list(csv.DictReader(path.read_text().splitlines()))
    return len({(r["Num instance"], r["Num GPU"]) for r in rows})


def whole_gpu_baseline(
    services: tuple[Service, ...], table: ProfileTable, rule: BatchingRule
) -> int:
    """One model per whole GPU (7g, no MIG split): GPUs = sum of ceil(rate / best 7g rate)."""
    total = 0
    for so in all_options(services, table, GPU, rule):
        seven = [o for o in so.options if o.kind == "7g"]
        if not seven:
            raise SystemExit(f"{so.service.name}: no 7g option")
        total += math.ceil(so.required_rps / seven[0].throughput_rps - 1e-9)
    return total


def synthetic(n: int, table: ProfileTable, seed: int = 7) -> tuple[Service, ...]:
    rng = np.random.default_rng(seed)
    models = table.models()
    out = []
    for i in range(n):
        model = models[int(rng.integers(len(models)))]
        fastest = best_latency(table, model, 3).latency_ms
        slo = fastest / 0.5 * float(rng.uniform(2.0, 10.0))
        rate = float(np.exp(rng.uniform(np.log(20), np.log(3000))))
        out.append(Service(f"svc{i:04d}", model, round(rate, 1), round(slo, 1)))
    return tuple(out)


def scenarios(table: ProfileTable, sim_s: float) -> None:
    default = replace(BatchingRule(), latency_fraction=0.45)
    print("ParvaGPU A100-80GB scenarios (GPUs used)")
    head = (
        f"{'scen':>4} {'svcs':>4} {'ParvaGPU':>8} {'ILP(P)':>6} {'LB':>3} {'heur(P)':>7} "
        f"{'viol(P)':>7} {'ILP(T)':>6} {'LB':>3} {'viol(T)':>7} {'1/GPU':>5} {'saved':>6} "
        f"{'ms':>6}"
    )
    print(head)
    for sc in range(1, 7):
        svcs = parvagpu_scenario(sc)
        p = plan_ilp(svcs, table, GPU, PARVAGPU_RULE)
        h = plan_heuristic(svcs, table, GPU, PARVAGPU_RULE)
        t = plan_ilp(svcs, table, GPU, default)
        streams = poisson_streams(svcs, sim_s, seed=sc)
        vp = simulate(p, streams, table, seed=sc).violations
        vt = simulate(t, streams, table, seed=sc).violations
        base = whole_gpu_baseline(svcs, table, default)
        saved = 1 - t.gpus_used / base
        print(
            f"{sc:>4} {len(svcs):>4} {parvagpu_reference_gpus(sc):>8} "
            f"{p.gpus_used:>5}{'*' if p.optimal else ' '} {p.lower_bound:>3} {h.gpus_used:>7} "
            f"{vp:>7} {t.gpus_used:>5}{'*' if t.optimal else ' '} {t.lower_bound:>3} {vt:>7} "
            f"{base:>5} {saved:>6.0%} {t.solve_s * 1000:>6.0f}"
        )
    print(
        "(P) ParvaGPU's rule: batch latency <= 0.45 SLO, capacity = rate, <= 3 MPS procs.\n"
        "(T) Tessera default: same latency rule, rate <= 0.9 x capacity (burst headroom).\n"
        f"* proven optimal; LB lower bound; viol = services with p99 > SLO over {sim_s:g} s of\n"
        "Poisson traffic; 1/GPU = one model per whole GPU (rule T); saved = 1 - ILP(T)/(1/GPU)."
    )


def scale(table: ProfileTable, n: int, time_limit_s: float) -> None:
    svcs = synthetic(n, table)
    rule = BatchingRule()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        h = plan_heuristic(svcs, table, GPU, rule)
        runs.append(time.perf_counter() - t0)
    print(f"\n{n} synthetic services (seeded), default rule")
    target = "ok" if min(runs) < HEURISTIC_TARGET_S else "MISSED"
    print(f"  heuristic: {h.gpus_used} GPUs, slice lower bound {h.lower_bound}, "
          f"best of 3: {min(runs) * 1000:.0f} ms (target < {HEURISTIC_TARGET_S:g} s "
          f"for 1,000 services: {target})")
    options = all_options(svcs, table, GPU, rule)
    _, _, lp = solve_ilp(options, GPU, relax=True)
    print(f"  LP relaxation bound: {lp.dual_bound:.2f} -> {math.ceil(lp.dual_bound - 1e-6)} GPUs "
          f"({lp.solve_s * 1000:.0f} ms)")
    t0 = time.perf_counter()
    ex = plan_ilp(svcs, table, GPU, rule, time_limit_s=time_limit_s)
    wall = time.perf_counter() - t0
    gap = (ex.gpus_used - ex.lower_bound) / ex.gpus_used
    print(f"  exact ILP: {ex.gpus_used} GPUs, lower bound {ex.lower_bound}, gap {gap:.2%}, "
          f"{'optimal' if ex.optimal else 'not proven'}, {wall:.2f} s "
          f"(limit {time_limit_s:g} s, {lp.variables} variables)")
    base = whole_gpu_baseline(svcs, table, rule)
    print(f"  one model per whole GPU: {base} GPUs; ILP saves {1 - ex.gpus_used / base:.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--ilp-time-limit", type=float, default=60.0)
    ap.add_argument("--sim-seconds", type=float, default=10.0)
    args = ap.parse_args()
    table = load_parvagpu_profiles()
    scenarios(table, args.sim_seconds)
    scale(table, args.services, args.ilp_time_limit)


if __name__ == "__main__":
    main()
