"""Planner benchmarks: split times, exactness against enumeration, planning time at scale.

Run: ``PYTHONPATH=src python benchmarks/bench_plan.py [--quick]``. Prints four tables (timings
are single runs or medians on a shared, noisy machine):

1. data-parallel split times at 8/64/256 devices, CPU and wall (target: 64 devices under
   10 ms of CPU time; wall time on a loaded machine also counts other processes' turns);
2. the pipeline search against exhaustive enumeration of the same space on seeded random small
   cases (target: 0.0 % gap), with both run times;
3. the figures of issue 13 (old planner's answer → now);
4. hybrid 3-D planning time for LLaMA-70B (and LLaMA-7B, GPT-3 175B, a 256-layer GPT) at
   16/64/256 GPUs (``--quick`` stops at 64), with the plan's shape and step time. With
   ``--base SRC`` (the ``src`` folder of another checkout, e.g. a worktree of ``main``) each
   case is planned by both versions in turn, each in a fresh process, and the table shows CPU
   and wall time of both, their ratio and whether the step times agree (with the base's plan
   shape when it differs); ``--base-max-gpus N`` (default 64) skips the base run on larger
   cases.

``--one MODEL DEVICES BATCH`` plans one case and prints ``wall cpu step shape`` (used by the
A/B); ``--scale-only`` prints only table 4.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tessera.errors import SpecError
from tessera.model.cluster import Link, LinkKind
from tessera.model.gpus import resolve_flavor
from tessera.perf.memory import MemoryBudget
from tessera.perf.steptime import CostModel
from tessera.plan.api import dp_devices, nodes_for, parse_devices
from tessera.plan.dp import split_batch
from tessera.plan.exhaustive import exhaustive_pipeline_step_s
from tessera.plan.hybrid import plan_hybrid
from tessera.plan.models import LayeredModel, gpt, layered_model
from tessera.plan.pipeline import FlavorGroup, PipelineConfig, plan_pipeline

FLAVORS = ("A100-40GB", "V100", "T4", "RTX-2080Ti")


def median_s(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median (wall s, CPU s) of ``repeat`` calls: on a loaded machine wall time counts the
    time other processes held the cores, CPU time only this one's work."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def split_table(cm: CostModel) -> None:
    print(f"{'DP split':<42} {'cpu':>9} {'wall':>9}  result (target judged on CPU time)")
    for n in (8, 64, 256):
        counts = {resolve_flavor(f): n // 4 for f in FLAVORS}
        devices = dp_devices("imagenet", nodes_for(counts), cm)
        grad = cm.gradient_bytes("imagenet")
        plan = split_batch(devices, 100 * n, grad)
        wall, cpu = median_s(lambda d=devices, b=100 * n, g=grad: split_batch(d, b, g),
                             9 if n < 256 else 3)
        target = ("  (< 10 ms: " + ("ok)" if cpu < 0.010 else "MISSED)")) if n == 64 else ""
        print(f"{f'{n} devices, imagenet, B={100 * n}':<42} {cpu * 1e3:>6.2f} ms "
              f"{wall * 1e3:>6.2f} ms  eff {plan.efficiency:.1%}, {len(plan.shares)} used"
              f"{target}")


def random_case(rng: random.Random, cm: CostModel
                ) -> tuple[LayeredModel, list[FlavorGroup], PipelineConfig]:
    hidden = rng.choice([1024, 2048, 4096])
    model = gpt(rng.randint(1, 3), hidden, hidden // 64, rng.choice([512, 1024, 2048]))
    groups = []
    for name in rng.sample(["A100-40GB", "V100", "T4", "RTX-2080Ti", "L4"], rng.randint(1, 3)):
        f = resolve_flavor(name)
        groups.append(FlavorGroup(f, rng.randint(1, 2), cm.achieved_flops_per_s(f),
                                  MemoryBudget(f.mem_gib * rng.choice([0.3, 0.6, 1.0])),
                                  Link.of(LinkKind.NVLINK, 150.0), Link.of(LinkKind.INFINIBAND),
                                  rng.choice([2, 8])))
    cfg = PipelineConfig(rng.choice([1, 2, 4]), rng.choice([1, 2, 4, 8]), rng.choice([1, 2]),
                         allow_recompute=rng.random() < 0.7,
                         zero_levels=rng.choice([(0,), (0, 1, 2, 3), (0, 3)]),
                         max_tp=rng.choice([1, 2]))
    return model, groups, cfg


def exhaustive_table(cm: CostModel, cases: int) -> None:
    rng = random.Random(13)
    gaps, t_plan, t_ex, infeasible = [], 0.0, 0.0, 0
    for _ in range(cases):
        model, groups, cfg = random_case(rng, cm)
        start = time.perf_counter()
        best = exhaustive_pipeline_step_s(model, groups, cfg)
        t_ex += time.perf_counter() - start
        start = time.perf_counter()
        try:
            got = plan_pipeline(model, groups, cfg).step_time_s
        except SpecError:
            got = math.inf
        t_plan += time.perf_counter() - start
        if not math.isfinite(best):
            infeasible += 1
            continue
        gaps.append(got / best - 1)
    print(f"\npipeline search vs exhaustive: {cases} seeded random cases "
          f"({infeasible} infeasible, agreed)")
    print(f"  gap: max {max(gaps):+.4%}, mean {statistics.mean(gaps):+.4%}  (target 0.0 %: "
          + ("ok)" if max(gaps) <= 1e-9 else "MISSED)"))
    print(f"  time: search {t_plan / cases * 1e3:.0f} ms/case, exhaustive "
          f"{t_ex / cases * 1e3:.0f} ms/case")


def old_speed_groups(cm: CostModel, devices: str) -> list[FlavorGroup]:
    """Flavor groups at the old planner's speeds (ResNet-50-calibrated FLOP/s)."""
    return [FlavorGroup(f, n, cm.achieved_flops_per_s(f), MemoryBudget(f.mem_gib),
                        Link.of(LinkKind.NVLINK, 150.0), Link.of(LinkKind.INFINIBAND), 8)
            for f, n in parse_devices(devices).items()]


def issue_table(cm: CostModel) -> None:
    print("\nissue 13 figures: old planner -> exact search at the old speeds (1 copy, "
          "micro-batch 1, no TP/ZeRO) -> hybrid at roofline speeds (no TP/ZeRO; with them)")
    old_space = PipelineConfig(1, 1, zero_levels=(0,), max_tp=1)
    for name, devs, batch, old in (("gpt-8x4096", "A100:1,V100:2,T4:2", 4, 1.0997),
                                   ("gpt-12x4096", "A100:2,V100:2,T4:2", 8, 1.7627),
                                   ("gpt-12x4096", "T4:2,V100:2,A100:2", 8, 1.8154),
                                   ("gpt-12x4096", "V100:4", 4, 2.26),
                                   ("gpt-12x4096", "V100:4,T4:2", 4, 2.83)):
        m, c = layered_model(name), parse_devices(devs)
        same = plan_pipeline(m, old_speed_groups(cm, devs),
                             PipelineConfig(1, batch, zero_levels=(0,), max_tp=1))
        a = plan_hybrid(m, c, batch, cost_model=cm, base=old_space)
        b = plan_hybrid(m, c, batch, cost_model=cm)
        print(f"  {name} {devs:<20} B={batch}: {old:.4f} s -> {same.step_time_s:.4f} s -> "
              f"{a.step_time_s:.4f} s; {b.step_time_s:.4f} s")


#: (model, devices, global batch). ``gpt-256x4096`` is the "few hundred layers" case: 256
#: GPT blocks of hidden 4096 (51.5B parameters) plus embedding and head.
SCALE_CASES = (("llama-70b", "H100:8,A100:8", 64),
               ("llama-70b", "H100:16,A100:16,V100:32", 256),
               ("llama-7b", "H100:8,A100:16,V100:32", 512),
               ("gpt3-175b", "H100:32,A100:32", 256),
               ("gpt-256x4096", "H100:16,A100:16,V100:32", 256),
               ("llama-70b", "H100:64,A100:64,V100:128", 1024))


def plan_one(name: str, devs: str, batch: int) -> tuple[float, float, float, str]:
    """(wall s, CPU s, step s, shape) of one hybrid plan in this process."""
    cm = CostModel(estimate_unprofiled=True)
    model, counts = layered_model(name), parse_devices(devs)
    wall, cpu = time.perf_counter(), time.process_time()
    h = plan_hybrid(model, counts, batch, cost_model=cm)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    shape = ", ".join(f"{s.flavor.short} TP{s.tp}xDP{s.replicas}" for s in h.stages)
    return wall, cpu, h.step_time_s, f"{h.dp_copies} copies x [{shape}]"


def run_one(src: str, name: str, devs: str, batch: int
            ) -> tuple[float, float, float, str] | None:
    """(wall s, CPU s, step s, shape) of one plan by the code under ``src``, in a fresh
    process; ``None`` if that code cannot plan the case (e.g. it lacks the model)."""
    env = {**os.environ, "PYTHONPATH": src}
    proc = subprocess.run([sys.executable, __file__, "--one", name, devs, str(batch)],
                          env=env, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    out = proc.stdout
    wall, cpu, step, shape = out.split(maxsplit=3)
    return float(wall), float(cpu), float(step), shape.strip()


def scale_table(quick: bool, base: str | None, base_max_gpus: int) -> None:
    print(f"\n3-D planning time (CPU s / wall s{'; base = ' + base if base else ''})")
    head = f"{'case':<50} {'new cpu':>8} {'wall':>7}"
    if base:
        head += f" {'base cpu':>9} {'wall':>7} {'cpu ratio':>9}  same step (and shape)"
    print(head + "  plan")
    here = str(Path(__file__).resolve().parents[1] / "src")
    for name, devs, batch in SCALE_CASES:
        gpus = sum(parse_devices(devs).values())
        if quick and gpus > 64:
            continue
        label = f"{name}, {gpus} GPUs ({devs}), B={batch}"
        old, tried = None, bool(base and gpus <= base_max_gpus)
        if tried:                                # alternate: base first, then new
            old = run_one(str(base), name, devs, batch)
        new = run_one(here, name, devs, batch)
        if new is None:
            print(f"{label:<50} failed")
            continue
        wall, cpu, step, shape = new
        row = f"{label:<50} {cpu:>8.1f} {wall:>7.1f}"
        if base:
            if old is None:
                row += f" {'failed' if tried else 'skipped':>9} {'':>7} {'':>9}  "
            else:
                same = "yes" if math.isclose(old[2], step, rel_tol=1e-9) else (
                    f"NO ({old[2]:.4f} s)")
                if old[3] != shape:
                    same += f", other shape: {old[3]}"
                row += f" {old[1]:>9.1f} {old[0]:>7.1f} {old[1] / cpu:>8.1f}x  {same}"
        print(f"{row}  {shape}, step {step:.2f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer exhaustive cases; table 4 stops at 64 GPUs")
    ap.add_argument("--scale-only", action="store_true", help="print only table 4")
    ap.add_argument("--base", metavar="SRC", default=None,
                    help="another checkout's src/: plan each table-4 case with both versions")
    ap.add_argument("--base-max-gpus", type=int, default=64, metavar="N",
                    help="skip the base run on cases above N GPUs (default 64)")
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "DEVICES", "BATCH"),
                    help="plan one case and print 'wall cpu step shape' (used by the A/B)")
    args = ap.parse_args()
    if args.one:
        wall, cpu, step, shape = plan_one(args.one[0], args.one[1], int(args.one[2]))
        print(f"{wall} {cpu} {step} {shape}")
        return
    if not args.scale_only:
        cm = CostModel(estimate_unprofiled=True)
        split_table(cm)
        exhaustive_table(cm, 12 if args.quick else 40)
        issue_table(cm)
    scale_table(args.quick, args.base, args.base_max_gpus)


if __name__ == "__main__":
    main()
