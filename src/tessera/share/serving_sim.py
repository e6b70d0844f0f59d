"""Request-stream simulation of a plan: does every service meet its p99 latency SLO?

The planner reasons about averages (capacity >= rate, batch latency within budget). Real
traffic arrives in bursts, so this module replays a request stream against the plan's instances
and measures each request's latency, like a load test on paper.

Model (one deterministic pass, no global event queue needed):

1. *Routing.* Each service's requests are dealt to its segments by smooth weighted round robin,
   in proportion to segment throughput (a weighted load balancer).
2. *Batching.* Inside a segment, each of the ``procs`` MPS processes is a worker. By default
   batching is work-conserving: a free worker at once takes every waiting request, up to
   ``batch``. A request then waits at most for the batch in progress and runs in the next one,
   which is why the planner keeps a batch within half the SLO. The ``timeout`` policy instead
   waits for a full batch until the oldest request has waited ``slo_ms - latency_ms``.
3. *Execution.* A batch of ``n`` requests runs for the profiled latency of batch ``n`` with the
   segment's process count (interpolated between measured batch sizes; partial batches are
   faster). Every request in it completes at the batch's end.

Segments share nothing (MIG isolates them), so each is simulated on its own, in arrival order:
the whole simulation is a pure function of (plan, streams, profile table, seed).

Arrival streams come from :func:`poisson_streams` or :mod:`~tessera.share.arrivals` (trace-shaped
bursts from the Alibaba DLRM and GenAI traces).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from tessera.errors import SpecError
from tessera.share.plan import SharePlan
from tessera.share.profiles import Curve, ProfileTable, Service
from tessera.share.segments import SegmentOption


@dataclass(frozen=True, slots=True, eq=False)
class RequestStream:
    """Arrival times (seconds, sorted) of one service's requests."""

    service: str
    arrivals_s: np.ndarray


@dataclass(frozen=True, slots=True)
class ServiceOutcome:
    """Measured latency of one service over the stream."""

    service: str
    slo_ms: float
    requests: int
    p50_ms: float
    p99_ms: float
    attainment: float  # fraction of requests within the SLO

    @property
    def meets_slo(self) -> bool:
        return self.requests == 0 or self.p99_ms <= self.slo_ms


@dataclass(frozen=True, slots=True)
class SimResult:
    services: tuple[ServiceOutcome, ...]

    @property
    def violations(self) -> int:
        """Services whose p99 latency exceeds their SLO."""
        return sum(not s.meets_slo for s in self.services)

    @property
    def attainment(self) -> float:
        """Fraction of all requests served within their SLO."""
        total = sum(s.requests for s in self.services)
        if total == 0:
            return 1.0
        return sum(s.attainment * s.requests for s in self.services) / total


def poisson_streams(
    services: tuple[Service, ...], duration_s: float, seed: int = 0
) -> tuple[RequestStream, ...]:
    """Independent Poisson arrivals at each service's rate for ``duration_s`` seconds."""
    rng = np.random.default_rng(seed)
    out = []
    for s in services:
        n = int(rng.poisson(s.rate_rps * duration_s))
        out.append(RequestStream(s.name, np.sort(rng.uniform(0.0, duration_s, n))))
    return tuple(out)


def _segment_latencies_ms(
    arrivals_s: np.ndarray, seg: SegmentOption, curve: Curve, slo_ms: float, timeout: bool
) -> np.ndarray:
    """Per-request latency through one segment (arrivals sorted)."""
    n_req = len(arrivals_s)
    out = np.empty(n_req)
    lat_by_n = [0.0] + [curve.at(n).latency_ms / 1000.0 for n in range(1, seg.batch + 1)]
    max_wait_s = max(0.0, (slo_ms - seg.latency_ms) / 1000.0) if timeout else None
    arr = arrivals_s.tolist()
    workers = [0.0] * seg.procs
    heapq.heapify(workers)
    i = 0
    b = seg.batch
    while i < n_req:
        free = heapq.heappop(workers)
        if max_wait_s is None:  # work-conserving: run whatever is waiting
            start = max(free, arr[i])
        else:  # wait for a full batch, at most until the oldest request's timeout
            full_at = arr[i + b - 1] if i + b - 1 < n_req else float("inf")
            start = max(free, min(full_at, arr[i] + max_wait_s))
        j = min(bisect_right(arr, start, i), i + b)
        finish = start + lat_by_n[j - i]
        out[i:j] = (finish - arrivals_s[i:j]) * 1000.0
        heapq.heappush(workers, finish)
        i = j
    return out


def _weighted_round_robin(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Segment index per request: smooth weighted round robin, random phase per segment.

    Segment ``j`` owns the virtual slots ``(k + phase_j) / w_j``; merging every segment's slots in
    time order gives the dispatch sequence, so each segment receives every ``W / w_j``-th request
    on average, evenly spread (what a least-loaded balancer approximates).
    """
    total = weights.sum()
    slots = [
        (np.arange(int(np.ceil(n * w / total)) + 2) + rng.uniform()) / w for w in weights
    ]
    owner = np.concatenate([np.full(len(sl), j) for j, sl in enumerate(slots)])
    order = np.argsort(np.concatenate(slots), kind="stable")
    return owner[order][:n]


def simulate(
    plan: SharePlan,
    streams: tuple[RequestStream, ...],
    table: ProfileTable,
    *,
    seed: int = 0,
    batching: str = "greedy",
) -> SimResult:
    """Replay ``streams`` against ``plan``; report p50/p99 and SLO attainment per service.

    ``batching`` is ``greedy`` (a free worker runs whatever is waiting, up to the batch size)
    or ``timeout`` (wait for a full batch until the oldest request's deadline slack runs out).
    """
    if batching not in ("greedy", "timeout"):
        raise SpecError(f"unknown batching policy {batching!r}: use greedy or timeout")
    rng = np.random.default_rng(seed)
    outcomes = []
    by_name = {s.name: s for s in plan.services}
    for stream in streams:
        lat = request_latencies_ms(plan, stream, table, rng, batching)
        svc = by_name[stream.service]
        n = len(lat)
        outcomes.append(
            ServiceOutcome(
                svc.name,
                svc.slo_ms,
                n,
                float(np.percentile(lat, 50)) if n else 0.0,
                float(np.percentile(lat, 99)) if n else 0.0,
                float(np.mean(lat <= svc.slo_ms)) if n else 1.0,
            )
        )
    return SimResult(tuple(outcomes))


def request_latencies_ms(
    plan: SharePlan,
    stream: RequestStream,
    table: ProfileTable,
    rng: np.random.Generator,
    batching: str = "greedy",
) -> np.ndarray:
    """Latency (ms) of every request of one stream, in arrival order (see the module
    docstring); ``rng`` draws the router's phases."""
    if batching not in ("greedy", "timeout"):
        raise SpecError(f"unknown batching policy {batching!r}: use greedy or timeout")
    svc = next((s for s in plan.services if s.name == stream.service), None)
    if svc is None:
        raise SpecError(f"stream for unknown service {stream.service!r}")
    segs = [inst.segment for inst in plan.instances_of(svc.name)]
    if not segs:
        raise SpecError(f"service {svc.name!r} has no instances in the plan")
    weights = np.array([s.throughput_rps for s in segs])
    route = _weighted_round_robin(weights, len(stream.arrivals_s), rng)
    lat = np.empty(len(stream.arrivals_s))
    for k, seg in enumerate(segs):
        mask = route == k
        if mask.any():
            curve = table.curve(seg.model, seg.kind, seg.procs)
            lat[mask] = _segment_latencies_ms(
                stream.arrivals_s[mask], seg, curve, svc.slo_ms, batching == "timeout"
            )
    return lat
