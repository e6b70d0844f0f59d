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
at least one GPU) and the micro-batch size (powers of two up to 8), solving each pipeline
exactly with :func:`~tessera.plan.pipeline.plan_pipeline` (whose stages choose their own
tensor parallelism, recomputation and ZeRO level) and pricing every candidate with the same
step-time formula; it also prices plain data parallelism. Per-layer times come from FLOPs
divided by each flavor's sustained FLOP/s, which the cost model calibrates on the measured
ResNet-50 profile (:meth:`tessera.perf.steptime.CostModel.achieved_flops_per_s`). GPUs the best
plan leaves idle are reported as dropped, with the reason.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tessera.errors import SpecError
from tessera.model.cluster import Link
from tessera.model.gpus import GpuFlavor
from tessera.perf.memory import MemoryBudget, TrainingFootprint
from tessera.perf.steptime import CostModel, DeviceCost
from tessera.plan.devices import default_cost_model, nodes_for
from tessera.plan.dp import DpDevice, DpPlan, DroppedClass, split_batch
from tessera.plan.layers import LayeredModel, coarsen
from tessera.plan.pipeline import (
    DEFAULT_PASS_OVERHEAD_S,
    FlavorGroup,
    PipelineConfig,
    PreparedSearch,
    prepare_search,
    walk_search,
)
from tessera.plan.stages import Stage

MICRO_BATCH_CHOICES = (1, 2, 4, 8)
#: Longest layer chain the hybrid search plans without coarsening (search cost ~ layers³).
DEFAULT_MAX_LAYERS = 24


@dataclass(frozen=True, slots=True)
class DroppedGpus:
    """GPUs of one flavor the plan leaves idle, and why."""

    flavor: GpuFlavor
    count: int
    reason: str


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
        stages: one copy's stages (pipeline); empty for data parallel.
        dp: the data-parallel split (data parallel only).
        step_time_s: predicted time per step.
        dropped: GPUs offered but left idle, per flavor, with the reason.
        estimated: flavors whose times are roofline estimates (no measurement backs them).
    """

    model: str
    kind: str
    global_bsz: int
    dp_copies: int
    micro_bsz: int
    n_micro: int
    stages: tuple[Stage, ...]
    dp: DpPlan | None
    step_time_s: float
    dropped: tuple[DroppedGpus, ...] = ()
    estimated: tuple[str, ...] = ()

    @property
    def throughput_samples_per_s(self) -> float:
        return self.global_bsz / self.step_time_s

    @property
    def bottleneck_s(self) -> float:
        """The slowest stage's per-micro-batch time (the pipeline's pace); 0 for data parallel."""
        return max((st.time_s for st in self.stages), default=0.0)

    def describe(self) -> str:
        lines = [f"{self.model}: {self.kind}, global batch {self.global_bsz}, "
                 f"step {self.step_time_s:.4f} s, {self.throughput_samples_per_s:,.2f} samples/s"]
        if self.dp is not None:
            for sh in self.dp.shares:
                lines.append(f"  {sh.flavor.short:<12} {sh.node_id:<16} local batch "
                             f"{sh.local_bsz}")
        else:
            # Totals over all copies, as the device lines and the JSON's ``dp`` count them: a
            # stage runs on TP x DP GPUs, and its DP ranks share the copies' micro-batches (the
            # replicas of one copy split each micro-batch), so samples per step are copies x
            # micro-batches x micro-batch size -- the global batch -- whatever DP is.
            copies = self.dp_copies
            lines.append(f"  {copies} pipeline cop{'y' if copies == 1 else 'ies'} x "
                         f"{self.n_micro} micro-batches of {self.micro_bsz} = "
                         f"{copies * self.n_micro * self.micro_bsz} samples/step; bottleneck "
                         f"{self.bottleneck_s * 1e3:.2f} ms/micro-batch")
            for k, st in enumerate(self.stages):
                per_copy = f" ({st.replicas}/copy)" if copies > 1 else ""
                extras = "".join([per_copy, ", recompute" if st.recompute else "",
                                  f", ZeRO-{st.option.zero}" if st.option.zero else ""])
                shape = f"TP {st.tp} x DP {st.replicas * copies}{extras}"
                lines.append(
                    f"  stage {k:<3} layers {st.first_layer:>3}-{st.end_layer - 1:<3} on "
                    f"{st.gpus * copies:>3} x {st.flavor.short:<11} {shape:<36} "
                    f"{st.time_s * 1e3:8.2f} ms/micro-batch "
                    f"{st.mem_gib:6.1f} GiB, {st.in_flight} in flight")
        for d in self.dropped:
            lines.append(f"  dropped {d.count} x {d.flavor.short}: {d.reason}")
        if self.estimated:
            lines.append(f"  note: times on {', '.join(self.estimated)} are roofline estimates "
                         "(no measurement of that GPU backs them)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "kind": self.kind, "global_batch": self.global_bsz,
            "dp_copies": self.dp_copies, "pp_stages": len(self.stages),
            "micro_batch": self.micro_bsz, "n_micro": self.n_micro,
            "stages": [{"stage": k, "flavor": st.flavor.short, "gpus": st.gpus, "tp": st.tp,
                        "dp": st.replicas * self.dp_copies, "replicas": st.replicas,
                        "recompute": st.recompute, "zero": st.option.zero,
                        "first_layer": st.first_layer, "end_layer": st.end_layer,
                        "in_flight": st.in_flight, "time_s": st.time_s,
                        "compute_s": st.compute_s, "p2p_s": st.p2p_s,
                        "allreduce_s": st.allreduce_s, "mem_gib_per_gpu": st.mem_gib}
                       for k, st in enumerate(self.stages)],
            "devices": ([{"flavor": sh.flavor.short, "local_batch": sh.local_bsz}
                         for sh in self.dp.shares] if self.dp else []),
            "step_time_s": self.step_time_s,
            "bottleneck_s": self.bottleneck_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "dropped": [{"flavor": d.flavor.short, "count": d.count, "reason": d.reason}
                        for d in self.dropped],
            "estimated": list(self.estimated),
        }


def flavor_groups(model: LayeredModel, counts: Mapping[GpuFlavor, int], copies: int,
                  cost_model: CostModel, gpus_per_node: int,
                  links: Mapping[GpuFlavor, tuple[Link, Link]] | None = None
                  ) -> list[FlavorGroup]:
    """One copy's share of each flavor (``count // copies``), with speed, memory and links."""
    nodes = {n.flavor: n for n in nodes_for(counts, gpus_per_node, links)}
    rl = cost_model.roofline()
    return [
        FlavorGroup(f, n // copies, rl.sustained_flops_per_s(f, model.workload),
                    MemoryBudget(f.mem_gib), nodes[f].intra_link, nodes[f].inter_link,
                    gpus_per_node)
        for f, n in counts.items() if n // copies > 0
    ]


def estimated_flavors(model: LayeredModel, counts: Mapping[GpuFlavor, int],
                      cost_model: CostModel) -> tuple[str, ...]:
    """Flavors whose speed for ``model`` is a roofline estimate, not calibrated on them."""
    rl = cost_model.roofline()
    return tuple(sorted(f.short for f in counts
                        if not rl.efficiency(f, model.workload).measured))


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


def balance_bound_s(model: LayeredModel, groups: list[FlavorGroup], micro_bsz: int,
                    n_micro: int) -> float:
    """A lower bound on any pipeline's step time: M micro-batches at the pace of a perfectly
    balanced pipeline using every GPU (the bottleneck stage is at least the average work)."""
    rate = sum(g.count * g.flops_per_s for g in groups)
    if rate <= 0:
        return math.inf
    return n_micro * micro_bsz * model.train_flops_per_sample / rate


def plan_data_parallel_layered(model: LayeredModel, counts: Mapping[GpuFlavor, int],
                               global_bsz: int, cost_model: CostModel, gpus_per_node: int,
                               links: Mapping[GpuFlavor, tuple[Link, Link]] | None = None
                               ) -> DpPlan | None:
    """Plain data parallelism for a layer-wise model; ``None`` if the model fits nowhere."""
    fp = TrainingFootprint(model.params, sum(x.stash_bytes for x in model.layers),
                           model.state_bytes_per_param)
    devices: list[DpDevice] = []
    for node in nodes_for(counts, gpus_per_node, links):
        cap = fp.max_local_bsz(MemoryBudget(node.flavor.mem_gib))
        if cap < 1:
            continue
        beta = model.train_flops_per_sample / cost_model.roofline().sustained_flops_per_s(
            node.flavor, model.workload)
        cost = DeviceCost(node.flavor, DEFAULT_PASS_OVERHEAD_S, beta, cap)
        devices += [DpDevice(cost, node)] * node.gpus
    if not devices:
        return None
    try:
        return split_batch(devices, global_bsz, model.params * model.grad_bytes_per_param)
    except SpecError:
        return None


def plan_hybrid(model: LayeredModel, counts: Mapping[GpuFlavor, int], global_bsz: int, *,
                cost_model: CostModel | None = None, gpus_per_node: int = 8,
                base: PipelineConfig | None = None,
                max_layers: int | None = DEFAULT_MAX_LAYERS, dp_copies: int | None = None,
                micro_bsz: int | None = None,
                links: Mapping[GpuFlavor, tuple[Link, Link]] | None = None) -> HybridPlan:
    """The fastest data, pipeline or data × pipeline plan (see the module docstring).

    Args:
        base: which stage options the pipelines may use (its batching fields are ignored);
            default: recomputation, ZeRO 0–3 and tensor parallelism up to 8.
        max_layers: coarsen longer layer chains to this many (stage boundaries every few
            blocks; :func:`~tessera.plan.models.coarsen`); ``None`` plans the full chain.
        dp_copies: plan exactly this many pipeline copies (data-parallel degree across
            copies) instead of searching it; the global batch must divide among them.
        micro_bsz: likewise fix the micro-batch size (the global batch must be a multiple of
            copies × micro-batch size).
        links: per flavor, (within-server, between-server) links instead of the catalog's
            defaults (:func:`~tessera.plan.api.nodes_for`).

    Raises:
        SpecError: nothing fits (the message says how much memory is short and what would
            help), the global batch is not a positive integer, or it does not divide into
            the fixed copies × micro-batch size.
    """
    if global_bsz < 1:
        raise SpecError(f"global batch must be a positive integer, got {global_bsz}")
    if not counts:
        raise SpecError("no devices to plan over")
    _check_fixed(counts, global_bsz, dp_copies, micro_bsz)
    cm = cost_model or default_cost_model()
    proto = base or PipelineConfig(1, 1)
    best: HybridPlan | None = None
    dp = plan_data_parallel_layered(model, counts, global_bsz, cm, gpus_per_node, links)
    if dp is not None:
        best = HybridPlan(model.name, "data-parallel", global_bsz, len(dp.shares), 0, 0,
                          (), dp, dp.step_time_s)
    chain = coarsen(model, max_layers) if max_layers else model
    prepared, last_error = _prepare_settings(model, chain, counts, global_bsz, cm, gpus_per_node,
                                             proto, best.step_time_s if best else math.inf,
                                             (dp_copies, micro_bsz), links)
    heap = [(prep.lower_bound_s, k, prep) for k, prep in enumerate(prepared)]
    heapq.heapify(heap)
    while heap:                              # most promising setting first
        bound, k, prep = heapq.heappop(heap)
        if best is not None and bound >= best.step_time_s:
            break                            # no setting left can win
        if prep.tighten(best.step_time_s if best is not None else math.inf):   # may rule it out
            heapq.heappush(heap, (prep.lower_bound_s, k, prep))
            continue
        p = walk_search(prep, best.step_time_s if best is not None else math.inf)
        if p is not None and (best is None or p.step_time_s < best.step_time_s):
            cfg = prep.config
            stages = tuple(dataclasses.replace(
                st, first_layer=chain.original_layer(st.first_layer),
                end_layer=chain.original_layer(st.end_layer)) for st in p.stages)
            best = HybridPlan(model.name, "pipeline", global_bsz, cfg.dp_copies, cfg.micro_bsz,
                              cfg.n_micro, stages, None, p.step_time_s)
    if best is None:
        raise SpecError(_no_fit(chain, counts, global_bsz, cm, gpus_per_node, proto,
                                last_error, links))
    if not math.isfinite(best.step_time_s):
        raise SpecError(f"{model.name}: no finite plan found")
    return _with_dropped(best, counts, estimated_flavors(model, counts, cm))


def _check_fixed(counts: Mapping[GpuFlavor, int], global_bsz: int, dp_copies: int | None,
                 micro_bsz: int | None) -> None:
    """Refuse fixed copies / micro-batch sizes the global batch cannot be split into."""
    if dp_copies is not None and not 1 <= dp_copies <= max(counts.values()):
        raise SpecError(f"pipeline copies must be between 1 and {max(counts.values())} (the "
                        f"most GPUs of one flavor), got {dp_copies}")
    if micro_bsz is not None and micro_bsz not in MICRO_BATCH_CHOICES:
        raise SpecError(f"micro-batch size must be one of {MICRO_BATCH_CHOICES}, got {micro_bsz}")
    unit = (dp_copies or 1) * (micro_bsz or 1)
    if global_bsz % unit:
        lower = global_bsz // unit * unit
        near = f"{lower} or {lower + unit}" if lower else str(unit)
        raise SpecError(f"global batch {global_bsz} is not divisible by {dp_copies or 1} "
                        f"pipeline copies x micro-batch {micro_bsz or 1} = {unit}: use a "
                        f"multiple of {unit} (e.g. {near})")


#: Every memory saver the search knows: ZeRO 0–3, recomputation, tensor parallelism up to 8.
ALL_SAVERS = PipelineConfig(1, 1)


def _no_fit(chain: LayeredModel, counts: Mapping[GpuFlavor, int], global_bsz: int,
            cm: CostModel, gpus_per_node: int, proto: PipelineConfig, message: str,
            links: Mapping[GpuFlavor, tuple[Link, Link]] | None = None) -> str:
    """The no-fit message of the most favourable setting (one copy, micro-batch 1), and — when
    the search was denied memory savers — whether they would make the model fit (checked)."""
    if not message:
        return f"{chain.name} does not fit on these devices with global batch {global_bsz}"
    denied = (3 not in proto.zero_levels or not proto.allow_recompute
              or proto.max_tp < ALL_SAVERS.max_tp)
    if not denied or "what could help" not in message:
        return message
    groups = flavor_groups(chain, counts, 1, cm, gpus_per_node, links)
    try:
        prepare_search(chain, groups, PipelineConfig(1, global_bsz))
    except SpecError:
        return message.split("; what could help")[0] + (
            "; even with ZeRO-3, recomputation and tensor parallelism up to 8 it does not "
            "fit: add GPUs, or GPUs with more memory")
    return message.split("; what could help")[0] + (
        "; it fits with all memory savers enabled (ZeRO-3, recomputation, tensor parallelism "
        "up to 8): allow them")


def _prepare_settings(model: LayeredModel, chain: LayeredModel,
                      counts: Mapping[GpuFlavor, int], global_bsz: int, cm: CostModel,
                      gpus_per_node: int, proto: PipelineConfig, beat_s: float,
                      fixed: tuple[int | None, int | None] = (None, None),
                      links: Mapping[GpuFlavor, tuple[Link, Link]] | None = None,
                      ) -> tuple[list[PreparedSearch], str]:
    """Bound and seed every (copies, micro-batch) setting that a perfect-balance bound does
    not already rule out; also the first no-fit message, for when nothing fits anywhere.

    Walking the settings afterwards in order of their lower bounds, each with the best step
    time found so far, lets most of them stop after these first rounds.
    """
    prepared: list[PreparedSearch] = []
    last_error = ""
    for copies, mb, n_micro in pipeline_configs(counts, global_bsz):
        if fixed[0] not in (None, copies) or fixed[1] not in (None, mb):
            continue
        groups = flavor_groups(model, counts, copies, cm, gpus_per_node, links)
        if balance_bound_s(model, groups, mb, n_micro) >= beat_s:
            continue
        cfg = PipelineConfig(mb, n_micro, copies, proto.overhead_s, proto.allow_recompute,
                             proto.zero_levels, proto.max_tp)
        try:
            prepared.append(prepare_search(chain, groups, cfg))
        except SpecError as exc:
            last_error = last_error or str(exc)
    return prepared, last_error


def _with_dropped(plan: HybridPlan, counts: Mapping[GpuFlavor, int],
                  estimated: tuple[str, ...]) -> HybridPlan:
    """Name the GPUs the plan leaves idle (the search proved using them would not help)."""
    if plan.dp is not None:
        used = {f: sum(1 for sh in plan.dp.shares if sh.flavor == f) for f in counts}
        reasons = {f: _dp_reason([d for d in plan.dp.dropped if d.flavor == f]) for f in counts}
    else:
        used = {f: plan.dp_copies * sum(st.gpus for st in plan.stages if st.flavor == f)
                for f in counts}
        reasons = {}
    dropped = []
    for f in sorted(counts, key=lambda fl: fl.name):
        idle = counts[f] - used.get(f, 0)
        if idle > 0:
            reason = reasons.get(f) or (
                "not needed: the best plan in the search space leaves it idle (every plan "
                "that uses it is no faster)" if plan.kind == "pipeline" else "not needed")
            dropped.append(DroppedGpus(f, idle, reason))
    return HybridPlan(plan.model, plan.kind, plan.global_bsz, plan.dp_copies, plan.micro_bsz,
                      plan.n_micro, plan.stages, plan.dp, plan.step_time_s, tuple(dropped),
                      estimated)


def _dp_reason(classes: list[DroppedClass]) -> str:
    """One flavor's reason from the data-parallel planner's per-server ones.

    Each server's reason speaks of that server's GPUs (``using all 2 would …``), so the
    server is named, and with several servers each with its count
    (``2 on t4-0000: using all 2 would …; 2 on t4-0001: …``).
    """
    if len(classes) == 1:
        return f"on {classes[0].node_id}: {classes[0].reason}"
    return "; ".join(f"{d.count} on {d.node_id}: {d.reason}" for d in classes)
