"""Data-parallel plans with gradient compression, and the choice of a scheme for a slow link.

``tessera plan --compress SCHEME`` costs the step's gradient exchange with that scheme's bytes on
the wire and its encode/decode compute (:mod:`tessera.perf.compression`: how the PowerSGD and
3LC bytes are estimated from a parameter count is derived there), and puts the uncompressed plan
next to it; ``--compress auto`` plans with every scheme and keeps the one with the lowest
predicted step time (ties: the simplest, in :data:`~tessera.perf.compression.SCHEMES` order).
The planner chooses the devices *with* the scheme: a slow server that is not worth its all-reduce
uncompressed may be worth using once the gradient is 30× smaller.

``--link-gbps G`` replaces the link between servers by Ethernet at ``G`` gigabits per second
(``G/8`` GB/s, :data:`SLOW_LINK_LATENCY_US` per hop) -- what ``tessera train --link-gbps``
emulates between ranks. GPUs within one server keep their NVLink/PCIe; ``--gpus-per-server 1``
puts every GPU on its own server, so that every hop of the ring is the slow link.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.cluster import Link, LinkKind
from tessera.model.gpus import GpuFlavor
from tessera.perf.compression import SCHEMES, CompressionSpec, parse_compression
from tessera.perf.steptime import CostModel
from tessera.plan.api import dp_devices
from tessera.plan.devices import default_cost_model, nodes_for
from tessera.plan.dp import DEFAULT_MAX_MICRO_STEPS, DpPlan, split_batch

SLOW_LINK_LATENCY_US = 50.0
"""Per-hop latency of an emulated Ethernet link (the same default as ``tessera train``)."""


@dataclass(frozen=True, slots=True)
class CompressionChoice:
    """The plan with the chosen scheme, and the plans it was chosen among.

    Attributes:
        chosen: the plan costed with the chosen (or the given) scheme.
        plans: scheme name → its plan; always holds ``none``, the baseline.
        auto: whether the scheme was chosen (``--compress auto``) rather than given.
    """

    chosen: DpPlan
    plans: dict[str, DpPlan]
    auto: bool

    @property
    def baseline(self) -> DpPlan:
        """The uncompressed plan."""
        return self.plans["none"]

    def describe(self) -> list[str]:
        """Lines saying what the scheme changes against uncompressed training."""
        base, p = self.baseline, self.chosen
        lines = []
        if self.auto:
            lines.append("compression    auto: predicted step time per scheme: " + ", ".join(
                f"{name} {plan.step_time_s:.4f} s" for name, plan in self.plans.items()))
        if p is base:
            return lines
        gain = base.step_time_s / p.step_time_s
        lines.append(
            f"compression    {p.compression}: step {p.step_time_s:.4f} s on {len(p.shares)} "
            f"GPUs (exchange {p.allreduce_time_s:.4f} s) instead of {base.step_time_s:.4f} s "
            f"on {len(base.shares)} GPUs uncompressed (exchange {base.allreduce_time_s:.4f} s):"
            f" {gain:.2f}x the throughput")
        return lines


def slow_links(devices: Mapping[GpuFlavor, int], link_gbps: float
               ) -> dict[GpuFlavor, tuple[Link | None, Link]]:
    """Every flavor's servers joined by Ethernet at ``link_gbps`` Gb/s (intra links kept)."""
    if not link_gbps > 0:
        raise SpecError(f"--link-gbps must be > 0, got {link_gbps}")
    inter = Link(LinkKind.ETHERNET, link_gbps / 8.0, SLOW_LINK_LATENCY_US)
    return {f: (None, inter) for f in devices}


def plan_with_compression(
    model: str, devices: Mapping[GpuFlavor, int], global_bsz: int, *, compress: str = "none",
    link_gbps: float | None = None, cost_model: CostModel | None = None,
    gpus_per_node: int = 8, max_micro_steps: int = DEFAULT_MAX_MICRO_STEPS,
) -> CompressionChoice:
    """Plan ``model`` with the scheme ``compress`` (or ``auto``), optionally on slow links.

    Raises:
        SpecError: an unknown scheme or a non-positive link speed.
    """
    cm = cost_model or default_cost_model()
    links = slow_links(devices, link_gbps) if link_gbps is not None else None
    nodes = nodes_for(devices, gpus_per_node, links)  # type: ignore[arg-type]  # None: default
    offered = dp_devices(model, nodes, cm)
    grad_bytes = cm.gradient_bytes(model)
    auto = compress.strip().lower() == "auto"
    specs = ([CompressionSpec(s) for s in SCHEMES] if auto
             else [CompressionSpec(), parse_compression(compress)])
    plans: dict[str, DpPlan] = {}
    for spec in specs:
        plans[str(spec)] = split_batch(offered, global_bsz, grad_bytes,
                                       max_micro_steps=max_micro_steps, compression=spec)
    chosen = min(plans.values(), key=lambda p: p.step_time_s) if auto \
        else plans[str(specs[-1])]
    return CompressionChoice(chosen, plans, auto)
