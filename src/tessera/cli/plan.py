"""``tessera plan``: how one job should use a mixed set of GPUs.

Data-parallel (default)::

    tessera plan --model imagenet --devices A100:2,V100:4,T4:2 --global-batch 1024 [--json]

prints each device's local batch, the predicted step time and throughput, the efficiency
against the sum of the devices' standalone throughputs, and why any device was left out.

Three-dimensional plans (tensor × pipeline × data parallelism, with recomputation and ZeRO
chosen per stage) for layer-wise models — today's transformers (``llama-7b``, ``llama-13b``,
``llama-70b``, ``gpt3-1.3b`` …, ``vit-l16``) are planned that way automatically; ``--pipeline``
forces it for ``resnet50``, ``bert-large``, ``gpt``, ``gpt-<layers>x<hidden>``::

    tessera plan --model llama-7b --devices H100:8,A100:16,V100:32 --global-batch 512 --json

GPUs without a measurement get roofline estimates (:mod:`tessera.perf.roofline`), and the plan
says so. Heavy imports happen inside the command so ``tessera --help`` stays fast.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from tessera.cli.compress_help import COMPRESS_HELP, LINK_GBPS_HELP
from tessera.cli.options import (
    DEVICES_HELP,
    GLOBAL_BATCH_HELP,
    GPUS_PER_SERVER,
    JSON,
    deprecated_alias,
    prefer,
)


def register(app: typer.Typer) -> None:
    """Add the ``plan`` command to ``app``."""
    app.command("plan", epilog="Example: tessera plan --model imagenet "
                "--devices A100:2,V100:4,T4:2 --global-batch 1024")(plan)


def plan(
    model: str = typer.Option(..., "--model", help="Model: a profiled workload (imagenet, "
                              "bert, cifar10, deepspeech2, ncf, yolov3), a transformer "
                              "(llama-7b, llama-13b, llama-70b, gpt3-1.3b, gpt3-2.7b, "
                              "gpt3-6.7b, gpt3-13b, vit-l16) or, with --pipeline, a layer-wise "
                              "model (gpt, gpt-<layers>x<hidden>, bert-large, resnet50)."),
    devices: str = typer.Option(..., "--devices", help=DEVICES_HELP),
    global_batch: int = typer.Option(..., "--global-batch", help=GLOBAL_BATCH_HELP),
    as_json: bool = JSON,
    gpus_per_server: int = GPUS_PER_SERVER,
    max_micro_steps: int = typer.Option(8, "--max-micro-steps", help="Gradient-accumulation "
                                        "limit per device (1 = no accumulation)."),
    pipeline: bool = typer.Option(False, "--pipeline", help="Plan layer-split (tensor x "
                                  "pipeline x data) parallelism for a layer-wise model."),
    max_tp: int = typer.Option(8, "--max-tp", help="Largest tensor-parallel degree (within a "
                               "server; 1 = none)."),
    zero: int = typer.Option(3, "--zero", help="Highest ZeRO level a stage may use (0 = no "
                             "sharding, 3 = FSDP-style full sharding)."),
    recompute: bool = typer.Option(True, "--recompute/--no-recompute", help="Let stages "
                                   "recompute activations."),
    max_layers: int = typer.Option(24, "--max-layers", help="Coarsen longer layer chains to "
                                   "this many (stage boundaries every few blocks; the search "
                                   "grows with the cube of the chain length)."),
    old_gpus_per_node: int | None = deprecated_alias("--gpus-per-node", "--gpus-per-server"),
    compress: str = typer.Option("none", "--compress", help=COMPRESS_HELP),
    link_gbps: float | None = typer.Option(None, "--link-gbps", help=LINK_GBPS_HELP),
    energy: bool = typer.Option(False, "--energy", help="Also print the pipeline's energy per "
                                "step, and per-stage GPU power limits that save energy "
                                "within --max-slowdown of the step time (Perseus)."),
    max_slowdown: float = typer.Option(0.01, "--max-slowdown", help="With --energy: the step "
                                       "time the power limits may add, as a fraction (0.01 = "
                                       "1 %)."),
) -> None:
    """Plan a job on a mixed set of GPUs: per-device batches (or pipeline stages with their
    TP/PP/DP degrees), memory, predicted step time, throughput and efficiency."""
    from tessera.perf.steptime import CostModel
    from tessera.plan.api import parse_devices

    gpus_per_node = prefer(gpus_per_server, old_gpus_per_node, "--gpus-per-node",
                           "--gpus-per-server")
    counts = parse_devices(devices)
    cm = CostModel(estimate_unprofiled=True)
    compressed = compress.strip().lower() != "none" or link_gbps is not None
    if pipeline or model.strip().lower() not in cm.models():
        from tessera.errors import SpecError

        if compressed:
            raise SpecError("--compress and --link-gbps plan data-parallel jobs of a profiled "
                            f"model; {model!r} is planned layer-wise")
        from tessera.plan.pipeline import PipelineConfig

        if zero not in (0, 1, 2, 3):
            raise SpecError(f"--zero must be 0, 1, 2 or 3, got {zero}")
        if max_tp < 1 or max_layers < 1:
            raise SpecError("--max-tp and --max-layers must be at least 1")
        base = PipelineConfig(1, 1, allow_recompute=recompute,
                              zero_levels=tuple(range(zero + 1)), max_tp=max_tp)
        _pipeline(model, counts, global_batch, gpus_per_node, as_json, cm, base, max_layers,
                  pipeline, max_slowdown if energy else None)
        return
    if energy:
        from tessera.errors import SpecError

        raise SpecError(f"--energy tunes the stages of a pipeline plan; {model!r} is planned "
                        "data-parallel (add --pipeline for a layer-wise model)")
    from tessera.plan.api import plan_data_parallel

    choice = None
    if compressed:
        from tessera.plan.compression import plan_with_compression

        choice = plan_with_compression(model, counts, global_batch, compress=compress,
                                       link_gbps=link_gbps, cost_model=cm,
                                       gpus_per_node=gpus_per_node,
                                       max_micro_steps=max_micro_steps)
        p = choice.chosen
    else:
        p = plan_data_parallel(model, counts, global_batch, cost_model=cm,
                               gpus_per_node=gpus_per_node, max_micro_steps=max_micro_steps)
    estimated = sorted((f for f in counts if cm.fit(model, f).estimated), key=lambda f: f.short)
    if as_json:
        out = _dp_json(model, p)
        out["estimated"] = [f.short for f in estimated]
        if choice is not None:
            out["compression"] = p.compression
            out["link_gbps"] = link_gbps
            out["step_time_s_by_scheme"] = {k: v.step_time_s for k, v in choice.plans.items()}
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(f"{model}: global batch {global_batch} over {devices}")
    typer.echo(f"{'flavor':<12} {'node':<18} {'local batch':>11} {'micro-steps':>11} "
               f"{'compute s':>10}")
    for s in p.shares:
        typer.echo(f"{s.flavor.short:<12} {s.node_id:<18} {s.local_bsz:>11} "
                   f"{s.micro_steps:>11} {s.compute_time_s:>10.4f}")
    typer.echo(f"step time      {p.step_time_s:.4f} s  (compute {p.compute_time_s:.4f} s "
               f"+ all-reduce {p.allreduce_time_s:.4f} s)")
    typer.echo(f"throughput     {p.throughput_samples_per_s:,.1f} samples/s")
    typer.echo(f"bound          {p.bound_samples_per_s:,.1f} samples/s (sum of standalone "
               f"throughputs)  efficiency {p.efficiency:.1%}")
    for d in p.dropped:
        typer.echo(f"dropped {d.count} x {d.flavor.short} on {d.node_id}: {d.reason}")
    for line in choice.describe() if choice is not None else ():
        typer.echo(line)
    for f in estimated:
        typer.echo(f"note: {f.short} has no measured profile of {model}; its step times are "
                   f"roofline estimates ({cm.fit(model, f).rows_used})")


def _dp_json(model: str, p: Any) -> dict[str, Any]:
    devices: list[dict[str, Any]] = [
        {"flavor": s.flavor.short, "node": s.node_id, "local_batch": s.local_bsz,
         "micro_steps": s.micro_steps, "compute_time_s": s.compute_time_s}
        for s in p.shares
    ]
    for d in p.dropped:
        devices += [{"flavor": d.flavor.short, "node": d.node_id, "local_batch": 0,
                     "micro_steps": 0, "compute_time_s": 0.0}] * d.count
    return {
        "model": model,
        "global_batch": p.global_bsz,
        "devices": devices,
        "step_time_s": p.step_time_s,
        "compute_time_s": p.compute_time_s,
        "allreduce_time_s": p.allreduce_time_s,
        "compression": p.compression,
        "throughput_samples_per_s": p.throughput_samples_per_s,
        "bound_samples_per_s": p.bound_samples_per_s,
        "efficiency": p.efficiency,
        "dropped": [{"flavor": d.flavor.short, "node": d.node_id, "count": d.count,
                     "reason": d.reason} for d in p.dropped],
    }


def _pipeline(model: str, counts: Any, global_batch: int, gpus_per_node: int, as_json: bool,
              cm: Any, base: Any, max_layers: int, forced: bool,
              max_slowdown: float | None = None) -> None:
    from tessera.errors import NoProfileError
    from tessera.plan.api import plan_ranked
    from tessera.plan.models import layered_model

    try:
        layered = layered_model(model)
    except NoProfileError as exc:
        if forced:
            raise
        raise NoProfileError(f"unknown model {model!r}: known models with profiles (data "
                             f"parallel): {', '.join(cm.models())}; and {exc}") from None
    ranked = plan_ranked(layered, counts, global_batch, cost_model=cm,
                         gpus_per_node=gpus_per_node, base=base, max_layers=max_layers)
    tuned = None
    if max_slowdown is not None:
        from tessera.perf.power_estimate import default_power_model
        from tessera.plan.stage_power import tune_stage_power

        h = ranked.plan
        tuned = tune_stage_power(h.stages, h.n_micro, h.dp_copies, model,
                                 default_power_model(), max_slowdown)
    if as_json:
        out = ranked.to_json()
        if tuned is not None:
            out["energy"] = tuned.to_json()
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(ranked.describe())
    for line in tuned.describe() if tuned is not None else ():
        typer.echo(line)
