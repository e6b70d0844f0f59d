"""``tessera plan``: how one job should use a mixed set of GPUs.

Data-parallel (default)::

    tessera plan --model imagenet --devices A100:2,V100:4,T4:2 --global-batch 1024 [--json]

prints each device's local batch, the predicted step time and throughput, the efficiency
against the sum of the devices' standalone throughputs, and why any device was left out.

Pipeline / hybrid (``--pipeline``) plans a layer-wise model (``gpt``, ``bert-large``,
``resnet50``, ``gpt-<layers>x<hidden>``) over the devices, data × pipeline.
Heavy imports happen inside the command so ``tessera --help`` stays fast.
"""

from __future__ import annotations

import json
from typing import Any

import typer

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
                              "bert, cifar10, deepspeech2, ncf, yolov3) or, with --pipeline, "
                              "a layer-wise model (gpt, gpt-<layers>x<hidden>, bert-large, "
                              "resnet50)."),
    devices: str = typer.Option(..., "--devices", help=DEVICES_HELP),
    global_batch: int = typer.Option(..., "--global-batch", help=GLOBAL_BATCH_HELP),
    as_json: bool = JSON,
    gpus_per_server: int = GPUS_PER_SERVER,
    max_micro_steps: int = typer.Option(8, "--max-micro-steps", help="Gradient-accumulation "
                                        "limit per device (1 = no accumulation)."),
    pipeline: bool = typer.Option(False, "--pipeline", help="Plan layer-split (pipeline x data)"
                                  " parallelism for a layer-wise model."),
    old_gpus_per_node: int | None = deprecated_alias("--gpus-per-node", "--gpus-per-server"),
) -> None:
    """Plan a job on a mixed set of GPUs: per-device batches (or pipeline stages), predicted
    step time, throughput and efficiency."""
    from tessera.plan.api import parse_devices

    gpus_per_node = prefer(gpus_per_server, old_gpus_per_node, "--gpus-per-node",
                           "--gpus-per-server")
    counts = parse_devices(devices)
    if pipeline:
        _pipeline(model, counts, global_batch, gpus_per_node, as_json)
        return
    from tessera.plan.api import plan_data_parallel

    p = plan_data_parallel(model, counts, global_batch, gpus_per_node=gpus_per_node,
                           max_micro_steps=max_micro_steps)
    if as_json:
        typer.echo(json.dumps(_dp_json(model, p), indent=2))
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
        "throughput_samples_per_s": p.throughput_samples_per_s,
        "bound_samples_per_s": p.bound_samples_per_s,
        "efficiency": p.efficiency,
        "dropped": [{"flavor": d.flavor.short, "node": d.node_id, "count": d.count,
                     "reason": d.reason} for d in p.dropped],
    }


def _pipeline(model: str, counts: Any, global_batch: int, gpus_per_node: int,
              as_json: bool) -> None:
    from tessera.plan.hybrid import plan_hybrid
    from tessera.plan.models import layered_model

    h = plan_hybrid(layered_model(model), counts, global_batch, gpus_per_node=gpus_per_node)
    if as_json:
        typer.echo(json.dumps(h.to_json(), indent=2))
        return
    typer.echo(h.describe())
