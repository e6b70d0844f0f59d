"""Segments: the unit of GPU sharing, and how much of them each service needs.

A *segment* is one MIG instance running ``procs`` MPS processes of one model, each serving
batches of ``batch`` requests (ParvaGPU's "GPU segment"). Only replicas of the same model share
an instance, so services stay isolated from each other by MIG.

For a service with latency budget ``B`` (see :class:`~tessera.share.profiles.BatchingRule`),
the best segment of a given MIG kind is the highest-throughput (batch, procs) point whose batch
latency is within ``B``: a higher-throughput point on the same kind costs no more hardware, so
it dominates. Each service therefore has at most one *option* per kind (1g, 2g, 3g, 4g, 7g), and
a plan chooses how many segments of each option to run: enough that their throughputs add up to
the service's rate.

Lower bounds on the number of GPUs (the planner reports one beside every plan):

- *slice bound*: a service whose best option yields ``t`` req/s per compute slice needs at least
  ``ceil(rate / t)`` compute slices; all services together need ``ceil(total / 7)`` GPUs. The same
  holds on the 8-wide memory axis.
- the LP relaxation of the exact programme (in :mod:`~tessera.share.packing`), tighter and
  slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.share.mig import COMPUTE_SLICES, MEMORY_SLICES, MigGpu
from tessera.share.profiles import (
    BatchingRule,
    ProfileTable,
    Service,
    best_latency,
    candidate_points,
)

_EPS = 1e-9


class SloUnreachableError(SpecError):
    """No profiled configuration of the model meets the service's latency budget."""


@dataclass(frozen=True, slots=True)
class SegmentOption:
    """The best configuration of one service on one MIG kind."""

    service: str
    model: str
    kind: str
    batch: int
    procs: int
    latency_ms: float
    throughput_rps: float
    compute_slices: int
    memory_slices: int

    @property
    def rps_per_compute_slice(self) -> float:
        return self.throughput_rps / self.compute_slices


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    """A service and its best option per MIG kind (cheapest kind first)."""

    service: Service
    options: tuple[SegmentOption, ...]
    required_rps: float  # the rate plus the rule's utilisation headroom

    def option(self, kind: str) -> SegmentOption:
        for o in self.options:
            if o.kind == kind:
                return o
        raise KeyError(kind)


def service_options(
    service: Service, table: ProfileTable, gpu: MigGpu, rule: BatchingRule
) -> ServiceOptions:
    """Best (batch, procs) per kind within the SLO budget; reject unreachable SLOs."""
    budget = rule.budget_ms(service.slo_ms)
    by_kind: dict[str, SegmentOption] = {}
    for curve in table.curves_of(service.model):
        if curve.procs > rule.max_procs:
            continue
        prof = gpu.profile(curve.kind)
        for p in candidate_points(curve, rule, budget):
            cur = by_kind.get(curve.kind)
            better = cur is None or (p.throughput_rps, -p.latency_ms) > (
                cur.throughput_rps, -cur.latency_ms,
            )
            if better:
                by_kind[curve.kind] = SegmentOption(
                    service.name, service.model, curve.kind, p.batch, p.procs, p.latency_ms,
                    p.throughput_rps, prof.compute_slices, prof.memory_slices,
                )
    if not by_kind:
        fast = best_latency(table, service.model, rule.max_procs)
        raise SloUnreachableError(
            f"service {service.name!r} ({service.model}): SLO {service.slo_ms:g} ms allows "
            f"{budget:.2f} ms per batch ({rule.latency_fraction:g} x SLO), but the best latency "
            f"reachable is {fast.latency_ms:.2f} ms ({fast.kind}, batch {fast.batch}, "
            f"{fast.procs} process(es)); the SLO must be at least "
            f"{fast.latency_ms / rule.latency_fraction:.2f} ms"
        )
    opts = tuple(sorted(by_kind.values(), key=lambda o: (o.compute_slices, o.memory_slices)))
    return ServiceOptions(service, opts, rule.required_rps(service.rate_rps))


def all_options(
    services: tuple[Service, ...], table: ProfileTable, gpu: MigGpu, rule: BatchingRule
) -> tuple[ServiceOptions, ...]:
    names = [s.name for s in services]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"duplicate service names: {', '.join(dup)}")
    return tuple(service_options(s, table, gpu, rule) for s in services)


def _dp_key(thr: float, mem: int, rate: float) -> tuple[bool, int, float]:
    covers = thr >= rate - _EPS
    return (covers, -mem if covers else 0, thr)


def cheapest_cover(opts: ServiceOptions) -> tuple[SegmentOption, ...]:
    """Fewest compute slices whose segments carry the required rate (unbounded knapsack DP).

    ``best[k]`` is the highest throughput reachable with exactly ``k`` compute slices; the answer
    is the smallest ``k`` with ``best[k] >= rate``. Ties prefer more memory-efficient kinds (the
    memory axis is the one that strands slices), then more throughput.
    """
    rate = opts.required_rps
    per_slice = max(o.rps_per_compute_slice for o in opts.options)
    limit = math.ceil(rate / per_slice) + COMPUTE_SLICES
    best = [0.0] * (limit + 1)
    mem = [0] * (limit + 1)
    pick: list[SegmentOption | None] = [None] * (limit + 1)
    for k in range(1, limit + 1):
        for o in opts.options:
            if o.compute_slices > k:
                continue
            j = k - o.compute_slices
            if j > 0 and pick[j] is None:
                continue
            thr, m = best[j] + o.throughput_rps, mem[j] + o.memory_slices
            if pick[k] is None or _dp_key(thr, m, rate) > _dp_key(best[k], mem[k], rate):
                best[k], mem[k], pick[k] = thr, m, o
        if pick[k] is not None and best[k] >= rate - _EPS:
            out: list[SegmentOption] = []
            while k > 0:
                step = pick[k]
                assert step is not None
                out.append(step)
                k -= step.compute_slices
            return tuple(sorted(out, key=lambda o: -o.compute_slices))
    raise AssertionError("unreachable: the best option repeated covers any rate")


def slice_lower_bound(options: tuple[ServiceOptions, ...]) -> int:
    """GPUs needed even if slices could be shared perfectly (compute and memory axes)."""
    compute = 0
    memory = 0
    for so in options:
        rate = so.required_rps
        compute += math.ceil(rate / max(o.rps_per_compute_slice for o in so.options) - _EPS)
        memory += math.ceil(
            rate / max(o.throughput_rps / o.memory_slices for o in so.options) - _EPS
        )
    return max(
        math.ceil(compute / COMPUTE_SLICES - _EPS), math.ceil(memory / MEMORY_SLICES - _EPS), 0
    )
