"""Gradient compression on emulated slow links: none vs fp16 vs bf16 vs PowerSGD vs 3LC.

Trains the ``wide-mlp`` example (4.2 M parameters, 17 MB of fp32 gradient per step) on two
emulated T4 ranks with an equal split, every scheme on the same samples, once per emulated link
speed, and prints one table: samples/s, p99 step time, MB sent per rank and step, the mean
exchange time (codec + collectives + emulated wire), time to a target loss, and the final loss
(mean of the last 5 steps' global-batch losses, the same samples for every scheme) with its
difference to uncompressed. The target loss is uncompressed training's
final loss × ``--target-factor`` on the same link. Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/train_compression.py [--links 1,10] [--steps 40]

Compute is emulated (:mod:`tessera.train.emulation`), the links too (:mod:`tessera.train.links`);
the codecs run for real on this machine's CPU, one thread per rank. The machine is shared and
noisy: compare the rows of one run with each other.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

from tessera.model.gpus import resolve_flavor
from tessera.perf.compression import Collective, codec_time_s, parse_compression
from tessera.train.config import TrainConfig
from tessera.train.launcher import launch
from tessera.train.links import EmulatedLink
from tessera.train.step_stats import step_summary, time_to_loss_s

SCHEMES = ("none", "fp16", "bf16", "powersgd:rank=4", "3lc")
FINAL_WINDOW = 5
WIDE_MLP_PARAMS = 16 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 4 + 4


def run_one(scheme: str, link_gbps: float, args: argparse.Namespace) -> dict[str, Any]:
    """One run; its figures (the final loss over the last ``FINAL_WINDOW`` steps)."""
    cfg = TrainConfig(args.example, args.devices, global_batch=args.global_batch,
                      steps=args.steps, split="equal", seed=args.seed, lr=args.lr,
                      compress=scheme,
                      link_gbps=link_gbps, checkpoint_every=0)
    with tempfile.TemporaryDirectory() as tmp:
        result = launch(cfg, run_dir=tmp, timeout_s=600)
    records = result.measured_records()
    losses = [r["loss"] for r in result.log]
    return {"scheme": scheme, "link_gbps": link_gbps,
            **step_summary(records, cfg.global_batch),
            "final_loss": sum(losses[-FINAL_WINDOW:]) / FINAL_WINDOW,
            "log": [{"wall_s": r["wall_s"], "loss": r["loss"]} for r in result.log]}


def gpu_codec_projection(r: dict[str, Any], global_batch: int, n_params: int,
                         flavor: str = "T4", n_ranks: int = 2) -> float:
    """Samples/s if the measured exchange (CPU codec + collectives + emulated wire) were
    replaced by the modelled one on GPUs: the wire time of the bytes sent plus the planner's
    codec time on ``flavor`` (:func:`tessera.perf.compression.codec_time_s`). A projection,
    not a measurement: it says how much of the gap is this CPU's codec."""
    step_s = global_batch / r["samples_per_s"]
    wire = EmulatedLink(r["link_gbps"]).time_s(
        (Collective("allreduce", r["bytes_per_step"]),), n_ranks)
    codec = codec_time_s(parse_compression(r["scheme"]), n_params, resolve_flavor(flavor),
                         n_ranks)
    return global_batch / (step_s - r["exchange_s"] + wire + codec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", default="1,10", help="emulated link speeds, Gb/s")
    parser.add_argument("--schemes", default=";".join(SCHEMES),
                        help="schemes separated by ';' (powersgd options use commas)")
    parser.add_argument("--example", default="wide-mlp")
    parser.add_argument("--devices", default="T4:2")
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05, help="SGD rate")
    parser.add_argument("--target-factor", type=float, default=1.05)
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every scheme this many times, interleaved, and keep each "
                             "scheme's fastest run (other load on the machine only slows)")
    parser.add_argument("--json", help="also write every run's figures here")
    args = parser.parse_args()
    schemes = [s for s in args.schemes.split(";") if s]
    rows: list[dict[str, Any]] = []
    for link in (float(x) for x in args.links.split(",")):
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):
            for s in _schemes(schemes):
                r = run_one(s, link, args)
                if s not in best or r["samples_per_s"] > best[s]["samples_per_s"]:
                    best[s] = r
        runs = list(best.values())
        base = runs[0]
        target = base["final_loss"] * args.target_factor
        for r in runs:
            r["gpu_codec_samples_per_s"] = gpu_codec_projection(r, args.global_batch,
                                                                 WIDE_MLP_PARAMS)
            r["target_loss"] = target
            r["time_to_target_s"] = time_to_loss_s(r["log"], target)
            r["speedup"] = r["samples_per_s"] / base["samples_per_s"]
            r["loss_vs_none"] = r["final_loss"] / base["final_loss"] - 1
        rows += runs
        _print(runs, link, target)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "log"} for r in rows], f, indent=1)


def _schemes(schemes: list[str]) -> list[str]:
    """``none`` first (the baseline), then the others in the order given."""
    return ["none"] + [s for s in schemes if s != "none"]


def _print(runs: list[dict[str, Any]], link: float, target: float) -> None:
    print(f"\nlink {link:g} Gb/s (target loss {target:.4f})")
    print(f"{'scheme':<24} {'samples/s':>9} {'x none':>6} {'p99 ms':>7} {'MB/step':>8} "
          f"{'exch ms':>7} {'to target s':>11} {'final loss':>10} {'vs none':>8} "
          f"{'GPU-codec proj. x':>17}")
    for r in runs:
        ttt = r["time_to_target_s"]
        print(f"{r['scheme']:<24} {r['samples_per_s']:9.1f} {r['speedup']:6.2f} "
              f"{1000 * r['p99_step_s']:7.1f} {r['bytes_per_step'] / 1e6:8.3f} "
              f"{1000 * r['exchange_s']:7.1f} "
              f"{'never' if ttt is None else f'{ttt:.2f}':>11} {r['final_loss']:10.4f} "
              f"{100 * r['loss_vs_none']:+7.2f}% "
              f"{r['gpu_codec_samples_per_s'] / runs[0]['gpu_codec_samples_per_s']:17.2f}",
              flush=True)


if __name__ == "__main__":
    main()
