"""The result of planning: GPUs, each with a legal MIG layout and one segment per instance.

A :class:`SharePlan` is plain data: it says, for every GPU, which MIG instances to create (kind
and start slice, i.e. an explicit NVML placement) and what runs in each (model, batch size,
number of MPS processes). It also carries the evidence a reader needs to trust it: the lower
bound on GPUs, whether the solver proved optimality, and each service's planned capacity against
its rate. :func:`plan_to_json` gives the stable machine-readable form used by the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessera.share.mig import Layout, MigGpu, Placement, check_layout, creation_order
from tessera.share.profiles import BatchingRule, Service
from tessera.share.segments import SegmentOption


@dataclass(frozen=True, slots=True)
class Instance:
    """One MIG instance on one GPU and the segment it runs."""

    start: int
    segment: SegmentOption

    @property
    def placement(self) -> Placement:
        return Placement(self.start, self.segment.kind)


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    """One physical GPU: its layout (only the instances created) and their segments."""

    layout: Layout
    instances: tuple[Instance, ...]


@dataclass(frozen=True, slots=True)
class ServiceCapacity:
    """A service's planned throughput against its demand."""

    service: Service
    capacity_rps: float
    segments: int

    @property
    def meets_rate(self) -> bool:
        return self.capacity_rps >= self.service.rate_rps * (1 - 1e-9)

    @property
    def utilization(self) -> float:
        return self.service.rate_rps / self.capacity_rps if self.capacity_rps else float("inf")


@dataclass(frozen=True, slots=True)
class SharePlan:
    """A complete placement of every service's segments on MIG-partitioned GPUs.

    Attributes:
        gpu: GPU model (short name, e.g. ``A100-80GB``).
        method: ``heuristic`` or ``ilp``.
        gpus: one entry per GPU used.
        lower_bound: no plan with these profiles and this rule can use fewer GPUs.
        optimal: the solver proved ``len(gpus)`` is the minimum.
        solve_s: wall time of the planning call.
        services: the services planned, in input order.
        rule: the batching rule used.
    """

    gpu: str
    method: str
    gpus: tuple[GpuAssignment, ...]
    lower_bound: int
    optimal: bool
    solve_s: float
    services: tuple[Service, ...]
    rule: BatchingRule

    @property
    def gpus_used(self) -> int:
        return len(self.gpus)

    def capacities(self) -> tuple[ServiceCapacity, ...]:
        out = []
        for svc in self.services:
            segs = [i.segment for i in self.instances_of(svc.name)]
            out.append(ServiceCapacity(svc, sum(s.throughput_rps for s in segs), len(segs)))
        return tuple(out)

    def instances_of(self, service: str) -> tuple[Instance, ...]:
        return tuple(i for g in self.gpus for i in g.instances if i.segment.service == service)


def planning_model(rule: BatchingRule) -> str:
    """The model under which a plan is the fewest GPUs, in words: what the planner checks of a
    segment (profiled numbers only) and what it leaves out (queueing)."""
    rate = ("its rate" if rule.max_utilization >= 1
            else f"its rate ÷ {rule.max_utilization:g} (headroom)")
    return (f"profiles: each segment's profiled batch latency ≤ {rule.latency_fraction:g} × "
            f"its SLO, each service's profiled throughput ≥ {rate}; queueing delay is not "
            "modelled")


def plan_claim(plan: SharePlan) -> str:
    """What the plan's GPU count is, and under which model: never "optimal" alone."""
    if plan.optimal:
        return (f"fewest GPUs for these services under the planning model (proved by the "
                f"solver) — {planning_model(plan.rule)}")
    return (f"not proved fewest: at least {plan.lower_bound} GPU(s) under the planning model "
            f"— {planning_model(plan.rule)}")


def replay_verdict(plan: SharePlan, violations: int) -> str:
    """One line after the traffic replay, honest about a plan that misses SLOs."""
    if violations == 0:
        return "every service met its SLO in the replay"
    return (f"{violations} service(s) missed the SLO in the replay: the plan is the fewest GPUs "
            "under the profile model, which leaves queueing out, not a plan that meets every "
            "SLO under this traffic")


def gpu_assignment(gpu: MigGpu, instances: list[Instance]) -> GpuAssignment:
    """Validate a GPU's instances as a MIG layout (raises on an illegal one)."""
    ordered = tuple(sorted(instances, key=lambda i: i.start))
    layout = check_layout(gpu, [i.placement for i in ordered])
    return GpuAssignment(layout, ordered)


def plan_to_json(plan: SharePlan, gpu: MigGpu) -> dict[str, Any]:
    """The CLI's ``--json`` form: ``{"gpus_used", "lower_bound", "gpus": [...]}`` and more."""
    return {
        "gpu": plan.gpu,
        "method": plan.method,
        "gpus_used": plan.gpus_used,
        "lower_bound": plan.lower_bound,
        "optimal": plan.optimal,
        "optimal_under": planning_model(plan.rule),
        "solve_s": round(plan.solve_s, 4),
        "gpus": [
            {
                "layout": [str(p) for p in g.layout.placements],
                "create_order": [
                    {"gi_profile_id": s.gi_profile_id, "profile": s.profile_name, "start": s.start}
                    for s in creation_order(gpu, g.layout)
                ],
                "instances": [
                    {
                        "placement": str(i.placement),
                        "profile": gpu.profile(i.segment.kind).name,
                        "service": i.segment.service,
                        "model": i.segment.model,
                        "batch": i.segment.batch,
                        "procs": i.segment.procs,
                        "latency_ms": round(i.segment.latency_ms, 3),
                        "throughput_rps": round(i.segment.throughput_rps, 3),
                    }
                    for i in g.instances
                ],
            }
            for g in plan.gpus
        ],
        "services": [
            {
                "name": c.service.name,
                "model": c.service.model,
                "rate_rps": c.service.rate_rps,
                "slo_ms": c.service.slo_ms,
                "capacity_rps": round(c.capacity_rps, 3),
                "segments": c.segments,
            }
            for c in plan.capacities()
        ],
    }
