"""Heterogeneous data parallelism vs equal-split DDP, on emulated mixed GPUs.

Runs real multi-process training (gloo, one process per rank) with heterogeneity emulated as
described in ``tessera.train.emulation``: each rank's compute is padded to
``(overhead + per_sample · b) / speed``. All rows run in one invocation, back to back, so the
ratios are comparable on a shared machine.

Rows:

* ``equal-split DDP`` -- B/N per rank, never rebalanced: the slowest rank sets the pace.
* ``hetero (online)`` -- starts from the same equal split (the catalog says all ranks are alike)
  and must discover the 3:1:1 speeds from measured step times.
* ``hetero (planner prior)`` -- a real flavor mix (1×A100 + 2×T4, emulated at the catalog's
  fp16 tensor-core ratio) starting from the data-parallel planner's split (``--split
  planned``: the planner's answer for real GPUs, which may start very uneven), vs its own
  equal split.
* ``solo`` rows -- each speed alone (one rank, whole batch), the same harness: the sum of their
  throughputs is the bound ``X_max`` (no waiting, no communication).
* a mid-run speed change -- rank 0 drops to 1/3 of its speed; reports how many steps until the
  balancer re-split and the throughput after.

Usage: ``PYTHONPATH=src python benchmarks/bench_train.py [--example cnn] [--steps 40]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass

from tessera.train.config import TrainConfig
from tessera.train.emulation import EmulationConfig, SpeedChange
from tessera.train.launcher import TrainResult, launch


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    tput_samples_per_s: float
    final_split: tuple[int, ...]
    rebalances: int
    note: str = ""


def _run(cfg: TrainConfig) -> TrainResult:
    with tempfile.TemporaryDirectory(prefix="bench-train-") as d:
        return launch(cfg, run_dir=d, timeout_s=600)


def _row(name: str, r: TrainResult, note: str = "") -> Row:
    return Row(name, r.throughput_samples_per_s, r.final_split, len(r.rebalances), note)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="cnn")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--global-batch", type=int, default=96)
    ap.add_argument("--per-sample-ms", type=float, default=6.0)
    ap.add_argument("--overhead-ms", type=float, default=0.5)
    args = ap.parse_args()
    emu = EmulationConfig(args.overhead_ms / 1000, args.per_sample_ms / 1000)
    base = dict(example=args.example, global_batch=args.global_batch, steps=args.steps,
                emulation=emu, emulate=True, checkpoint_every=0)
    rows: list[Row] = []

    # 1. Speeds 3:1:1 (explicit), catalog says the ranks are identical (3×A100).
    equal = _run(TrainConfig(devices="A100:3", speeds=(3.0, 1.0, 1.0), split="equal", **base))
    rows.append(_row("3:1:1 equal-split DDP", equal))
    online = _run(TrainConfig(devices="A100:3", speeds=(3.0, 1.0, 1.0), split="planned", **base))
    rows.append(_row("3:1:1 hetero (online, from equal)", online))
    solo_fast = _run(TrainConfig(devices="A100:1", speeds=(3.0,), split="equal", **base))
    solo_slow = _run(TrainConfig(devices="A100:1", speeds=(1.0,), split="equal", **base))
    rows.append(_row("solo speed 3", solo_fast))
    rows.append(_row("solo speed 1", solo_slow))
    bound = solo_fast.throughput_samples_per_s + 2 * solo_slow.throughput_samples_per_s
    model_bound = sum(args.global_batch / ((emu.overhead_s + emu.per_sample_s * args.global_batch)
                                           / s) for s in (3.0, 1.0, 1.0))

    # 2. A flavor mix with the planner's split as prior.
    mix_equal = _run(TrainConfig(devices="A100:1,T4:2", split="equal", **base))
    mix = _run(TrainConfig(devices="A100:1,T4:2", split="planned", **base))
    rows.append(_row("A100+2×T4 equal-split DDP", mix_equal))
    rows.append(_row("A100+2×T4 hetero (planner prior)", mix))

    # 3. A speed change mid-run: rank 0 drops from 3 to 1.
    change_step = args.steps // 2
    changed = _run(TrainConfig(devices="A100:3", speeds=(3.0, 1.0, 1.0), split="planned",
                               speed_changes=(SpeedChange(change_step, 0, 1 / 3),), **base))
    after = [e for e in changed.rebalances if e["step"] >= change_step]
    lag = after[0]["step"] - change_step + 1 if after else None
    tail = [r["wall_s"] for r in changed.log if r["step"] >= change_step + (lag or 0) + 2]
    tail_tput = args.global_batch / statistics.mean(tail) if tail else float("nan")
    rows.append(Row(f"3:1:1 -> 1:1:1 at step {change_step}", changed.throughput_samples_per_s,
                    changed.final_split, len(changed.rebalances),
                    f"re-split {lag} step(s) after the change; {tail_tput:.0f} samples/s after"))

    print(f"\nexample={args.example} B={args.global_batch} steps={args.steps} "
          f"emulated: ({args.overhead_ms} ms + {args.per_sample_ms} ms × b) / speed\n")
    print(f"{'run':36s} {'samples/s':>10s}  {'final split':16s} {'rebal':>5s}  note")
    for r in rows:
        print(f"{r.name:36s} {r.tput_samples_per_s:10.0f}  {list(r.final_split)!s:16s} "
              f"{r.rebalances:5d}  {r.note}")
    print()
    x = online.throughput_samples_per_s
    print(f"3:1:1 hetero / equal-split DDP        = {x / equal.throughput_samples_per_s:.2f}x")
    print(f"3:1:1 hetero / sum of solo throughputs = {x / bound:.1%}  (bound {bound:.0f}/s)")
    print(f"3:1:1 hetero / device-model bound      = {x / model_bound:.1%}  "
          f"(bound {model_bound:.0f}/s, no overheads at all)")
    print(f"A100+2×T4 hetero / equal-split DDP    = "
          f"{mix.throughput_samples_per_s / mix_equal.throughput_samples_per_s:.2f}x")


if __name__ == "__main__":
    main()
