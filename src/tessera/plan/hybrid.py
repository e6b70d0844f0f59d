"""Hybrid data × pipeline plans over one cost model.

A job on N mixed GPUs can be run three ways, and the best depends on the model's size and the
links:

* **data parallel** — every GPU holds the whole model and a share of the batch
  (:mod:`tessera.plan.dp`); possible only when the model's training state fits on a GPU;
* **pipeline** — the layers are cut into stages over all GPUs (:mod:`tessera.plan.pipeline`);
* **hybrid** — R identical copies of a pipeline, each on N/R of the GPUs of every flavor (the
  remainder idles), each taking B/R samples per step; every stage's gradients are all-reduced
  across its R copies.

:func:`plan_hybrid` searches the copy count R (divisors of the global batch that leave each copy
at least one GPU), the micro-batch size (powers of two up to 8), and activation recomputation
(only when a setting does not fit without it), solving each pipeline with the heterogeneous DP
and pricing every candidate with the same step-time formula; it also prices plain data
parallelism. Per-layer times come from FLOPs divided by each flavor's sustained FLOP/s, which the
cost model calibrates on the measured ResNet-50 profile
(:meth:`tessera.perf.steptime.CostModel.achieved_flops_per_s`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.memory import MemoryBudget, TrainingFootprint
from tessera.perf.steptime import CostModel, DeviceCost
from tessera.plan.api import default_cost_model, nodes_for
from tessera.plan.dp import DpDevice, DpPlan, split_batch
from tessera.plan.models import LayeredModel
from tessera.plan.pipeline import (
    DEFAULT_PASS_OVERHEAD_S,
    FlavorGroup,
    PipelineConfig,
    Stage,
    plan_pipeline,
)

MICRO_BATCH_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class HybridPlan:
    """The chosen way to run a layer-wise model on a mixed set of GPUs.

    Attributes:
        model: model name.
        kind: ``data-parallel`` or ``pipeline`` (pipeline with ``dp_copies`` > 1 is hybrid).
        global_bsz: samples per step.
        dp_copies: pipeline copies (1 for plain pipeline; devices for data parallel).
        micro_bsz: samples per micro-batch (pipeline).
        n_micro: micro-batches per copy and step (pipeline).
        recompute: whether activations are recomputed (pipeline).
        stages: one copy's stages (pipeline); empty for data parallel.
        dp: the data-parallel split (data parallel only).
        step_time_s: predicted time per step.
    """

    model: str
    kind: str
    global_bsz: int
    dp_copies: int
    micro_bsz: int
    n_micro: int
    recompute: bool
    stages: tuple[Stage, ...]
    dp: DpPlan | None
    step_time_s: float

    @property
    def throughput_samples_per_s(self) -> float:
        return self.global_bsz / self.step_time_s

    def describe(self) -> str:
        lines = [f"{self.model}: {self.kind}, global batch {self.global_bsz}, "
                 f"step {self.step_time_s:.4f} s, {self.throughput_samples_per_s:,.2f} samples/s"]
        if self.dp is not None:
            for sh in self.dp.shares:
                lines.append(f"  {sh.flavor.short:<12} {sh.node_id:<16} local batch "
                             f"{sh.local_bsz}")
            return "\n".join(lines)
        lines.append(f"  {self.dp_copies} pipeline cop{'y' if self.dp_copies == 1 else 'ies'}, "
                     f"{self.n_micro} micro-batches of {self.micro_bsz}"
                     f"{', activation recomputation' if self.recompute else ''}")
        for k, s in enumerate(self.stages):
            lines.append(f"  stage {k:<3} layers {s.first_layer:>3}-{s.end_layer - 1:<3} on "
                         f"{s.replicas} x {s.flavor.short:<11} {s.time_s * 1e3:8.2f} ms/micro-batch"
                         f"  {s.mem_gib:6.1f} GiB")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "kind": self.kind, "global_batch": self.global_bsz,
            "dp_copies": self.dp_copies, "micro_batch": self.micro_bsz,
            "n_micro": self.n_micro, "recompute": self.recompute,
            "stages": [{"flavor": s.flavor.short, "replicas": s.replicas,
                        "first_layer": s.first_layer, "end_layer": s.end_layer,
                        "time_s": s.time_s, "allreduce_s": s.allreduce_s,
                        "mem_gib": s.mem_gib} for s in self.stages],
            "devices": ([{"flavor": s.flavor.short, "local_batch": s.local_bsz}
                         for s in self.dp.shares] if self.dp else []),
            "step_time_s": self.step_time_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
        }


def flavor_groups(model: LayeredModel, counts: Mapping[GpuFlavor, int], copies: int,
                  cost_model: CostModel, gpus_per_node: int) -> list[FlavorGroup]:
    """One copy's share of each flavor (``count // copies``), with speed, memory and links."""
    nodes = {n.flavor: n for n in nodes_for(counts, gpus_per_node)}
    return [
        FlavorGroup(f, n // copies, cost_model.achieved_flops_per_s(f), MemoryBudget(f.mem_gib),
                    nodes[f].intra_link, nodes[f].inter_link, gpus_per_node)
        for f, n in counts.items() if n // copies > 0
    ]


def pipeline_configs(counts: Mapping[GpuFlavor, int], global_bsz: int
                     ) -> Iterator[tuple[int, int, int]]:
    """(copies, micro-batch size, micro-batches) settings the hybrid search considers."""
    for copies in range(1, max(counts.values()) + 1):
        if global_bsz % copies:
            continue
        per_copy = global_bsz // copies
        for mb in MICRO_BATCH_CHOICES:
            if per_copy % mb == 0:
                yield copies, mb, per_copy // mb


def plan_data_parallel_layered(model: LayeredModel, counts: Mapping[GpuFlavor, int],
                               global_bsz: int, cost_model: CostModel,
                               gpus_per_node: int) -> DpPlan | None:
    """Plain data parallelism for a layer-wise model; ``None`` if the model fits nowhere."""
    fp = TrainingFootprint(model.params, sum(x.stash_bytes for x in model.layers),
                           model.state_bytes_per_param)
    devices: list[DpDevice] = []
    for node in nodes_for(counts, gpus_per_node):
        cap = fp.max_local_bsz(MemoryBudget(node.flavor.mem_gib))
        if cap < 1:
            continue
        beta = model.train_flops_per_sample / cost_model.achieved_flops_per_s(node.flavor)
        cost = DeviceCost(node.flavor, DEFAULT_PASS_OVERHEAD_S, beta, cap)
        devices += [DpDevice(cost, node)] * node.gpus
    if not devices:
        return None
    try:
        return split_batch(devices, global_bsz, model.params * model.grad_bytes_per_param)
    except SpecError:
        return None


def plan_hybrid(model: LayeredModel, counts: Mapping[GpuFlavor, int], global_bsz: int, *,
                cost_model: CostModel | None = None, gpus_per_node: int = 8) -> HybridPlan:
    """The fastest data, pipeline or data × pipeline plan found (see the module docstring).

    Raises:
        SpecError: nothing fits (the message says how much memory the model state needs).
    """
    if global_bsz < 1:
        raise SpecError(f"global batch must be a positive integer, got {global_bsz}")
    if not counts:
        raise SpecError("no devices to plan over")
    cm = cost_model or default_cost_model()
    best: HybridPlan | None = None
    dp = plan_data_parallel_layered(model, counts, global_bsz, cm, gpus_per_node)
    if dp is not None:
        best = HybridPlan(model.name, "data-parallel", global_bsz, len(dp.shares), 0, 0, False,
                          (), dp, dp.step_time_s)
    for copies, mb, n_micro in pipeline_configs(counts, global_bsz):
        groups = flavor_groups(model, counts, copies, cm, gpus_per_node)
        for recompute in (False, True):
            cfg = PipelineConfig(mb, n_micro, copies, recompute)
            try:
                p = plan_pipeline(model, groups, cfg)
            except SpecError:
                continue
            if best is None or p.step_time_s < best.step_time_s:
                best = HybridPlan(model.name, "pipeline", global_bsz, copies, mb, n_micro,
                                  recompute, p.stages, None, p.step_time_s)
            break   # recomputation only when the plain setting does not fit
    if best is None:
        total = sum(f.mem_gib * n for f, n in counts.items())
        need = model.params * model.state_bytes_per_param / 2**30
        raise SpecError(
            f"{model.name} does not fit on these devices: its training state alone needs "
            f"{need:.1f} GiB plus activations, the devices have {total:.0f} GiB in total"
        )
    if not math.isfinite(best.step_time_s):
        raise SpecError(f"{model.name}: no finite plan found")
    return best
