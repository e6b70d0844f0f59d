"""``tessera train``: run a real example as a heterogeneous data-parallel job on this machine.

One local process per device. With GPUs (one per rank), ranks run on them over NCCL; without,
heterogeneity is emulated over gloo (see :mod:`tessera.train.emulation`) and the output says so.
``--split equal`` is plain equal-split data parallelism, so the gain of balancing is one flag away.

With ``--split planned`` step 0 takes the data-parallel planner's split for the example's planner
model (``--plan-model`` overrides it), or catalog speeds when the planner cannot plan; the output
names the source and, for the planner, puts its predicted step time next to the measured one
(see :mod:`tessera.train.prior`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tessera.cli.compress_help import COMPRESS_HELP, LINK_GBPS_HELP
from tessera.cli.options import DEVICES_HELP, GLOBAL_BATCH_HELP, SEED
from tessera.errors import SpecError
from tessera.train.prior import PLAN_MODELS

if TYPE_CHECKING:
    from tessera.train.config import TrainConfig

SPLITS = ("planned", "equal")


def _parse_speeds(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise SpecError(f"--speeds {text!r}: expected numbers separated by commas") from None


def _parse_fail_at(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    step, sep, rank = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(step), int(rank)
    except ValueError:
        raise SpecError(f"--fail-at {text!r}: expected STEP:RANK, e.g. 5:1") from None


def register(app: typer.Typer) -> None:
    """Add the ``train`` command to the Tessera CLI."""

    @app.command("train", epilog="Example: tessera train cnn --devices A100:1,T4:2 "
                 "--split planned --steps 40; with stragglers: tessera train mlp --devices "
                 "A100:4 --stragglers 0.05 --seed 1 --coded --json; on a slow link: tessera "
                 "train wide-mlp --devices T4:2 --compress powersgd:rank=4 --link-gbps 1 "
                 "--json")
    def train(
        example: str = typer.Argument(
            ..., help="Example to train: mlp, cnn, transformer or wide-mlp."),
        devices: str = typer.Option(..., "--devices", help=DEVICES_HELP),
        split: str = typer.Option(
            "planned", "--split",
            help="planned: the planner's split at step 0 + online rebalancing; equal: plain DDP.",
        ),
        plan_model: str | None = typer.Option(
            None, "--plan-model",
            help="Planner model for the planned step-0 split (imagenet, cifar10, bert, "
                 "deepspeech2, yolov3, ncf); default by example: "
                 + ", ".join(f"{e}->{m}" for e, m in PLAN_MODELS.items()) + ".",
        ),
        steps: int = typer.Option(30, "--steps", help="Optimizer steps (same on every rank)."),
        global_batch: int = typer.Option(48, "--global-batch", help=GLOBAL_BATCH_HELP),
        speed_change: list[str] = typer.Option(
            [], "--speed-change",
            help="STEP:RANK:FACTOR: from STEP on, rank RANK's emulated speed is multiplied by "
                 "FACTOR (repeatable).",
        ),
        speeds: str | None = typer.Option(
            None, "--speeds", help="Override the emulated relative speeds, e.g. 3,1,1."
        ),
        checkpoint_dir: Path | None = typer.Option(
            None, "--checkpoint-dir", help="Checkpoint here; resume if a checkpoint exists."
        ),
        checkpoint_every: int = typer.Option(
            5, "--checkpoint-every", min=0,
            help="Checkpoint every N optimizer steps (0: only at the end)."),
        max_restarts: int = typer.Option(
            0, "--max-restarts", help="Restart all ranks from the last checkpoint after a failure."
        ),
        fail_at: str | None = typer.Option(
            None, "--fail-at", help="Fault injection STEP:RANK: that rank dies mid-step."
        ),
        lr: float = typer.Option(0.05, "--lr", min=0.0,
                                 help="SGD learning rate at --lr-batch samples per step."),
        lr_batch: int | None = typer.Option(
            None, "--lr-batch", min=1,
            help="The global batch --lr was chosen for (samples; default: --global-batch). "
                 "A run resumed at another global batch scales the rate from it."),
        lr_scaling: str = typer.Option(
            "linear", "--lr-scaling",
            help="How the rate follows the global batch B: linear (lr × B / lr-batch, Goyal "
                 "et al.'s rule) or none (lr at any batch)."),
        stragglers: float = typer.Option(
            0.0, "--stragglers",
            help="Inject transient stragglers: each (rank, step) is --straggler-factor times "
                 "slower with this probability (0..1), drawn from --seed. Example: "
                 "--stragglers 0.05 --coded."),
        straggler_factor: float = typer.Option(
            3.0, "--straggler-factor", help="How many times slower a straggling rank is."),
        coded: bool = typer.Option(
            False, "--coded",
            help="Gradient-coded steps: any --code-k of the n ranks decide a step, exactly "
                 "(each rank computes n-k+1 partitions)."),
        code_k: int | None = typer.Option(
            None, "--code-k", help="k of the coded mode (default n-1: one straggler tolerated)."),
        staleness: int = typer.Option(
            0, "--staleness",
            help="Bounded staleness S: apply late ranks' gradients up to S steps old instead "
                 "of waiting (0: synchronous)."),
        compress: str = typer.Option("none", "--compress", help=COMPRESS_HELP),
        link_gbps: float | None = typer.Option(None, "--link-gbps", help=LINK_GBPS_HELP),
        link_latency_us: float = typer.Option(
            50.0, "--link-latency-us", help="Per-hop latency of the emulated link (µs)."),
        seed: int = SEED,
        as_json: bool = typer.Option(False, "--json", help="End the output with one JSON "
                                     "summary line (for scripts)."),
    ) -> None:
        """Train EXAMPLE on a mixed set of GPUs, one rank per GPU (emulated when this machine
        has none)."""
        from tessera.train.config import FailAt, TrainConfig
        from tessera.train.emulation import parse_speed_change

        if split not in SPLITS:
            raise SpecError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
        if max_restarts < 0:
            raise SpecError("--max-restarts must be ≥ 0")
        fail = _parse_fail_at(fail_at)
        cfg = TrainConfig(
            example=example, devices=devices, global_batch=global_batch, steps=steps,
            split=split, plan_model=plan_model, seed=seed, lr=lr, lr_batch=lr_batch,
            lr_scaling=lr_scaling, speeds=_parse_speeds(speeds),
            speed_changes=tuple(parse_speed_change(s) for s in speed_change),
            checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None,
            checkpoint_every=checkpoint_every, fail_at=FailAt(*fail) if fail else None,
            verbose=True, stragglers=stragglers, straggler_factor=straggler_factor,
            coded=coded, code_k=code_k, staleness=staleness,
            compress=compress, link_gbps=link_gbps,
            link_latency_us=link_latency_us,
        )
        _check_compression(cfg)
        _run(cfg, max_restarts, as_json)


def _check_compression(cfg: TrainConfig) -> None:
    """Reject a scheme this model or backend cannot run, before any rank starts."""
    if cfg.compression.scheme == "none":
        return
    import torch

    from tessera.train.compression import check_compression, gradient_shapes
    from tessera.train.worker import use_emulation

    nccl = None
    backend = "gloo" if use_emulation(cfg) else "nccl"
    if backend == "nccl":
        nccl = tuple(torch.cuda.nccl.version())
    check_compression(cfg.compression, gradient_shapes(cfg.example), backend, nccl)


def _run(cfg: TrainConfig, max_restarts: int, as_json: bool) -> None:
    """Launch the ranks, then print per-rank step times, throughput and (optionally) JSON."""
    from tessera.train.devices import describe_devices
    from tessera.train.launcher import launch
    from tessera.train.worker import use_emulation

    slots = cfg.slots
    typer.echo(f"tessera train {cfg.example}: {describe_devices(slots)} "
               f"({cfg.world_size} ranks), split={cfg.split}, global batch {cfg.global_batch}, "
               f"{cfg.steps} steps")
    if use_emulation(cfg):
        e = cfg.emulation
        speeds = ", ".join(f"rank {s.rank} {s.flavor.short} {v:.2f}"
                           for s, v in zip(slots, cfg.emulated_speeds(), strict=True))
        typer.echo("heterogeneity is EMULATED (no GPU per rank): each rank's compute is padded "
                   f"to ({1000 * e.overhead_s:g} ms + {1000 * e.per_sample_s:g} ms × batch) / "
                   f"speed; relative speeds: {speeds}")
    typer.echo("precision per rank: " + ", ".join(
        f"{s.flavor.short} {s.precision}" for s in slots))
    start = cfg.initial_split_info()
    typer.echo(start.describe())
    if cfg.compression.scheme != "none" or cfg.link is not None:
        from tessera.train.compression import describe, gradient_shapes

        d = describe(cfg.compression, gradient_shapes(cfg.example))
        link = (f"; link EMULATED at {cfg.link_gbps:g} Gb/s, {cfg.link_latency_us:g} µs per hop"
                if cfg.link is not None else "")
        typer.echo(f"gradient exchange: {d['scheme']}, {d['bytes_per_step'] / 1e6:.3f} MB per "
                   f"rank and step (fp32: {d['fp32_bytes_per_step'] / 1e6:.3f} MB, "
                   f"{d['ratio']:.1f}x less"
                   + ("; 3lc: at most, zero runs shrink it" if cfg.compression.scheme == "3lc"
                      else "") + f"){link}")
    result = launch(cfg, max_restarts=max_restarts)
    typer.echo("")
    typer.echo("rank  flavor       speed  mean compute ms  final batch")
    for s, v, t, b in zip(slots, result.speeds, result.mean_compute_s(), result.final_split,
                          strict=True):
        typer.echo(f"{s.rank:4d}  {s.flavor.short:11s}  {v:5.2f}  {1000 * t:15.1f}  {b:11d}")
    typer.echo(f"throughput {result.throughput_samples_per_s:.0f} samples/s, "
               f"{len(result.rebalances)} rebalance(s), final loss {result.final_loss:.4f}, "
               f"restarts {result.restarts}"
               + (" (heterogeneity emulated)" if result.emulated else ""))
    if cfg.step_mode != "sync" or cfg.stragglers > 0:
        typer.echo(f"steps {cfg.step_mode}, stragglers {cfg.stragglers:g} "
                   f"({cfg.straggler_factor:g}× slower): p99 step time "
                   f"{1000 * result.p99_step_s:.1f} ms")
    if start.planner_step_s is not None and start.planner_samples_per_s is not None:
        typer.echo(f"measured step time {1000 * result.mean_step_s:.1f} ms "
                   f"({result.throughput_samples_per_s:.0f} samples/s); planner predicted "
                   f"{1000 * start.planner_step_s:.1f} ms ({start.planner_samples_per_s:.0f} "
                   f"samples/s) for {start.plan_model} on real GPUs"
                   + ("; emulated times follow the emulation model, not the profile"
                      if result.emulated else ""))
    summary = result.summary()
    if cfg.compression.scheme != "none" or cfg.link is not None:
        typer.echo(f"p99 step {1000 * summary['p99_step_s']:.1f} ms, "
                   f"{summary['bytes_per_step'] / 1e6:.3f} MB sent per rank and step, "
                   f"exchange {1000 * summary['exchange_s']:.1f} ms per step")
    if as_json:
        typer.echo(json.dumps(summary))
