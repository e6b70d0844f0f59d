"""Transient stragglers: plain, rebalanced, coded and bounded-staleness steps, emulated.

Runs real multi-process training (gloo, one process per rank, heterogeneity and stragglers
emulated: ``tessera.train.emulation`` and ``tessera.train.stragglers``) with and without injected
stragglers, back to back in one invocation so the rows are comparable on a shared machine:

* ``plain`` -- equal-split synchronous DDP (``--split equal``): every step waits for the slowest;
* ``rebalanced`` -- ``--split planned``: the online balancer (medians of measured step times);
* ``coded`` -- ``--coded`` (any k of n ranks decide a step exactly; default k = n − 1);
* ``stale S`` -- ``--staleness S`` (late gradients applied up to S steps later).

Columns: samples/s (B per step over the summed step times, warm-up excluded), median and p99
step time, time to a target loss (summed step times until the mean loss of the last 5 steps is
at or below the target), and the final loss (mean of the last 5 steps). The issue's goal: with
stragglers, coded p99 ≤ 1.3 × the straggler-free p99 (coded's own and plain DDP's shown).

Usage: ``PYTHONPATH=src python benchmarks/train_stragglers.py [--steps 200] [--rate 0.05]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass

from tessera.train.config import TrainConfig
from tessera.train.emulation import EmulationConfig
from tessera.train.launcher import TrainResult, launch

WINDOW = 5


@dataclass(frozen=True, slots=True)
class Row:
    mode: str
    rate: float
    samples_per_s: float
    median_step_s: float
    p99_step_s: float
    time_to_target_s: float | None
    final_loss: float


def _run(cfg: TrainConfig) -> TrainResult:
    with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as d:
        return launch(cfg, run_dir=d, timeout_s=900)


def time_to_target(result: TrainResult, target: float) -> float | None:
    """Summed step time until the mean loss of the last ``WINDOW`` steps is ≤ ``target``."""
    elapsed = 0.0
    losses: list[float] = []
    for r in result.log:
        elapsed += r["wall_s"]
        losses.append(r["loss"])
        if len(losses) >= WINDOW and statistics.fmean(losses[-WINDOW:]) <= target:
            return elapsed
    return None


def _row(mode: str, rate: float, r: TrainResult, target: float) -> Row:
    walls = [x["wall_s"] for x in r.measured_records()]
    return Row(mode, rate, r.throughput_samples_per_s, statistics.median(walls), r.p99_step_s,
               time_to_target(r, target),
               statistics.fmean(x["loss"] for x in r.log[-WINDOW:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="mlp")
    ap.add_argument("--devices", default="A100:4")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--global-batch", type=int, default=48)
    ap.add_argument("--per-sample-ms", type=float, default=2.0)
    ap.add_argument("--rate", type=float, default=0.05)
    ap.add_argument("--factor", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--staleness", type=int, default=2)
    ap.add_argument("--target-loss", type=float, default=0.35)
    ap.add_argument("--code-ks", default="3,2", help="k of each coded row (k < n)")
    ap.add_argument("--modes", default="plain,rebalanced,coded,stale")
    args = ap.parse_args()
    base = TrainConfig(
        args.example, args.devices, global_batch=args.global_batch, steps=args.steps,
        split="equal", seed=args.seed, straggler_factor=args.factor, checkpoint_every=0,
        emulate=True, emulation=EmulationConfig(overhead_s=0.0005,
                                                per_sample_s=args.per_sample_ms / 1000))
    n = base.world_size
    variants: dict[str, dict[str, object]] = {}
    for mode in args.modes.split(","):
        if mode == "coded":
            for k in (int(x) for x in args.code_ks.split(",")):
                variants[f"coded (k={k} of {n})"] = {"coded": True, "code_k": k}
        elif mode == "stale":
            variants[f"stale S={args.staleness}"] = {"staleness": args.staleness}
        else:
            variants[mode] = {"split": "planned"} if mode == "rebalanced" else {}
    rows = []
    for label, changes in variants.items():
        for rate in (0.0, args.rate):
            result = _run(base.with_changes(stragglers=rate, **changes))
            rows.append(_row(label, rate, result, args.target_loss))
            print(f"  ran {label} at rate {rate}", flush=True)
    print(f"\n{args.example} on {args.devices} (emulated, {args.per_sample_ms:g} ms/sample), "
          f"B = {args.global_batch}, {args.steps} steps, stragglers {args.factor:g}× slower, "
          f"seed {args.seed}, target loss {args.target_loss}\n")
    print("| steps | stragglers | samples/s | median step ms | p99 step ms | "
          "time to target s | final loss |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ttt = f"{r.time_to_target_s:.2f}" if r.time_to_target_s is not None else "not reached"
        print(f"| {r.mode} | {r.rate:g} | {r.samples_per_s:.0f} | {1000 * r.median_step_s:.1f} "
              f"| {1000 * r.p99_step_s:.1f} | {ttt} | {r.final_loss:.4f} |")
    by_mode: dict[str, dict[float, Row]] = {}
    for r in rows:
        by_mode.setdefault(r.mode, {})[r.rate] = r
    print()
    plain_free = next((m[0.0] for k, m in by_mode.items() if k == "plain"), None)
    for mode, m in by_mode.items():
        if 0.0 in m and args.rate in m:
            line = (f"{mode}: p99 with stragglers / own straggler-free p99 = "
                    f"{m[args.rate].p99_step_s / m[0.0].p99_step_s:.2f}")
            if plain_free is not None:
                line += (f"; / plain DDP's straggler-free p99 = "
                         f"{m[args.rate].p99_step_s / plain_free.p99_step_s:.2f}")
            print(line)


if __name__ == "__main__":
    main()
