"""Planner entry points that speak in models and flavors rather than cost objects.

These glue the cost model (:class:`tessera.perf.steptime.CostModel`) to the split in
:mod:`tessera.plan.dp`:

* :func:`parse_devices`, :func:`nodes_for` and :func:`default_cost_model` (device lists, their
  servers, the shared cost model) live in :mod:`tessera.plan.devices`, below every planner,
  and are re-exported here;
* :func:`plan_data_parallel` plans one job;
* :func:`plan_ranked` plans a layer-wise model (tensor × pipeline × data) and lays the plan
  out on concrete GPUs, rank by rank -- what ``tessera plan --json`` prints and the live
  service exports to each rank;
* :func:`predict_mixed_throughput` is the one-number answer (samples/s) for a job given GPUs of
  several flavors; the scheduler's mixed gangs (:mod:`tessera.sched.mixed.rates`) plan with the same
  :func:`~tessera.plan.dp.split_batch`, on the job's own servers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.errors import SpecError
from tessera.model.cluster import Link, Node
from tessera.model.gpus import GpuFlavor
from tessera.perf.steptime import CostModel
from tessera.plan.breakdown import StepBreakdown, breakdown
from tessera.plan.devices import default_cost_model as default_cost_model
from tessera.plan.devices import nodes_for as nodes_for
from tessera.plan.devices import parse_devices as parse_devices
from tessera.plan.dp import (
    DEFAULT_MAX_MICRO_STEPS,
    DpDevice,
    DpPlan,
    split_batch,
)
from tessera.plan.hybrid import DEFAULT_MAX_LAYERS, HybridPlan, plan_hybrid
from tessera.plan.pipeline import PipelineConfig
from tessera.plan.ranks import GpuSlot, RankRole, assign_ranks, slots_of_nodes

if TYPE_CHECKING:
    from tessera.plan.layers import LayeredModel


def dp_devices(model: str, nodes: Sequence[Node], cost_model: CostModel | None = None
               ) -> list[DpDevice]:
    """One :class:`DpDevice` per GPU on ``nodes``, costed for ``model``."""
    cm = cost_model or default_cost_model()
    out: list[DpDevice] = []
    for node in nodes:
        cost = cm.device_cost(model, node.flavor)
        out += [DpDevice(cost, node)] * node.gpus
    return out


def plan_data_parallel(
    model: str, devices: Mapping[GpuFlavor, int] | Sequence[Node], global_bsz: int, *,
    cost_model: CostModel | None = None, gpus_per_node: int = 8,
    max_micro_steps: int = DEFAULT_MAX_MICRO_STEPS,
) -> DpPlan:
    """Plan data-parallel training of ``model`` with ``global_bsz`` samples per step.

    Args:
        model: a model the cost model knows (``imagenet``, ``bert`` …).
        devices: flavor → GPU count (laid out with :func:`nodes_for`), or explicit nodes.
        global_bsz: samples per step.
        cost_model: defaults to the bundled Sia profiles.
        gpus_per_node: server size when ``devices`` is a mapping.
        max_micro_steps: gradient-accumulation limit per device.
    """
    cm = cost_model or default_cost_model()
    nodes = nodes_for(devices, gpus_per_node) if isinstance(devices, Mapping) else tuple(devices)
    return split_batch(dp_devices(model, nodes, cm), global_bsz, cm.gradient_bytes(model),
                       max_micro_steps=max_micro_steps)


def predict_mixed_throughput(
    model: str, devices_by_flavor: Mapping[GpuFlavor, int],
    global_bsz: int | None = None, *, cost_model: CostModel | None = None,
    gpus_per_node: int = 8, max_micro_steps: int = DEFAULT_MAX_MICRO_STEPS,
) -> float:
    """Samples per second of ``model`` trained data-parallel on a mix of flavors.

    The split is the planner's (balanced, capped, devices dropped when they slow the job).

    Args:
        model: a model the cost model knows.
        devices_by_flavor: flavor → GPU count (names are resolved where they enter:
            :func:`tessera.plan.devices.parse_devices`).
        global_bsz: samples per step; by default the most the devices hold in one pass
            (every device at its memory cap), which is where a linear step time is fastest.
        cost_model: defaults to the bundled Sia profiles.
        gpus_per_node: server size used to lay the GPUs out.
        max_micro_steps: gradient-accumulation limit per device.
    """
    cm = cost_model or default_cost_model()
    counts: dict[GpuFlavor, int] = {}
    for fl, n in devices_by_flavor.items():
        if n < 0:
            raise SpecError(f"negative GPU count for {fl.short}")
        if n:
            counts[fl] = counts.get(fl, 0) + n
    if not counts:
        return 0.0
    if global_bsz is None:
        global_bsz = sum(n * cm.fit(model, f).max_local_bsz for f, n in counts.items())
    plan = plan_data_parallel(model, counts, global_bsz, cost_model=cm,
                              gpus_per_node=gpus_per_node, max_micro_steps=max_micro_steps)
    tput = plan.throughput_samples_per_s
    return tput if math.isfinite(tput) else 0.0


@dataclass(frozen=True, slots=True)
class RankedPlan:
    """A layer-wise plan with its step-time breakdown and every GPU's role.

    What ``tessera plan --json`` prints for a layer-wise model and what the live service
    exports to each rank of a job that asks for a 3-D plan: one object, so both say the same.

    Attributes:
        plan: the chosen plan (:class:`~tessera.plan.hybrid.HybridPlan`).
        breakdown: compute / communication split and bound
            (:class:`~tessera.plan.breakdown.StepBreakdown`).
        ranks: one :class:`~tessera.plan.ranks.RankRole` per offered GPU, in rank order.
    """

    plan: HybridPlan
    breakdown: StepBreakdown
    ranks: tuple[RankRole, ...]

    def stage_devices(self) -> list[list[str]]:
        """Per stage, the devices running it (all copies), in rank order."""
        out: list[list[str]] = [[] for _ in range(max(1, len(self.plan.stages)))]
        for r in self.ranks:
            if r.stage >= 0:
                out[r.stage].append(r.device)
        return out

    def to_json(self) -> dict[str, Any]:
        out = self.plan.to_json()
        devices = self.stage_devices()
        for k, st in enumerate(out["stages"]):
            st["devices"] = devices[k]
        if self.plan.dp is not None:
            out["devices"] = [{"flavor": r.flavor.short, "device": r.device,
                               "local_batch": r.local_batch} for r in self.ranks]
        out.update(self.breakdown.to_json())
        out["ranks"] = [r.to_json() for r in self.ranks]
        return out

    def describe(self) -> str:
        lines = [self.plan.describe(), f"  {self.breakdown.describe()}"]
        for k, devs in enumerate(self.stage_devices()):
            if self.plan.stages or devs:
                lines.append(f"  stage {k} devices: {_ranges(devs)}")
        return "\n".join(lines)


def _ranges(devices: Sequence[str]) -> str:
    """``a:0-3, b:0-1`` for consecutive GPUs of a server."""
    runs: list[tuple[str, int, int]] = []
    for d in devices:
        node, _, idx = d.rpartition(":")
        i = int(idx)
        if runs and runs[-1][0] == node and runs[-1][2] == i - 1:
            runs[-1] = (node, runs[-1][1], i)
        else:
            runs.append((node, i, i))
    return ", ".join(f"{n}:{a}" if a == b else f"{n}:{a}-{b}" for n, a, b in runs) or "none"


def plan_ranked(model: LayeredModel, counts: Mapping[GpuFlavor, int], global_bsz: int,
                slots: Sequence[GpuSlot] | None = None, *, cost_model: CostModel | None = None,
                gpus_per_node: int = 8, base: PipelineConfig | None = None,
                max_layers: int | None = None,
                links: Mapping[GpuFlavor, tuple[Link, Link]] | None = None) -> RankedPlan:
    """Plan ``model`` on ``counts`` (:func:`~tessera.plan.hybrid.plan_hybrid`) and lay the plan
    out on ``slots`` (default: the GPUs of :func:`nodes_for`, server by server).

    ``max_layers`` ``None`` means the hybrid planner's default coarsening; ``links`` overrides
    a flavor's server links (:func:`nodes_for`).

    Raises:
        SpecError: nothing fits, or the plan's tensor-parallel groups do not fit the servers.
    """

    cm = cost_model or default_cost_model()
    cfg = base or PipelineConfig(1, 1)
    h = plan_hybrid(model, counts, global_bsz, cost_model=cm, gpus_per_node=gpus_per_node,
                    base=cfg, max_layers=DEFAULT_MAX_LAYERS if max_layers is None else max_layers,
                    links=links)
    order = (tuple(slots) if slots is not None
             else slots_of_nodes(nodes_for(counts, gpus_per_node, links)))
    return RankedPlan(h, breakdown(h, model, cm, cfg.overhead_s),
                      assign_ranks(h, order, model.n_layers))
