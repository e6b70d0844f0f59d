"""Heterogeneous data-parallel plans: which GPUs a job uses and how many samples each takes.

A job trains with a global batch of B samples per step on a mixed set of GPUs; every GPU
computes gradients on its local batch, then all of them average gradients in a ring
all-reduce. For a *given* set of devices the best local batches are computed exactly in
:mod:`tessera.plan.batch_split` (its docstring derives the continuous optimum T* and the
integer rounding with its bound; :func:`continuous_split`, :func:`integer_split` and
:class:`BatchTooLargeError` are re-exported here). This module chooses the set.

**Dropping devices.** A device that takes samples also joins the all-reduce ring, which adds
2(n−1) latency steps and may put a slow link (a PCIe box, an Ethernet hop) in the ring. So the
planner chooses *which* devices to use: identical devices (same cost, same server) form
classes; small instances (at most ``exact_limit`` class-count vectors) are enumerated exactly;
larger ones start from every subset of classes (or, with many classes, from all and each
leave-one-class-out) and improve by local search, adding or removing one device at a time
(first scored by the continuous optimum, then by the exact integer split). Tests compare
against brute force over every subset and every integer split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

from tessera.errors import SpecError
from tessera.model.cluster import Node
from tessera.model.gpus import GpuFlavor
from tessera.perf.comm import ring_over_nodes
from tessera.perf.compression import CompressionSpec, exchange_time_s
from tessera.perf.steptime import DeviceCost
from tessera.plan.batch_split import BatchTooLargeError, continuous_split, integer_split

__all__ = [
    "DEFAULT_EXACT_LIMIT", "DEFAULT_MAX_MICRO_STEPS", "BatchTooLargeError", "DeviceShare",
    "DpDevice", "DpPlan", "DroppedClass", "choose_counts", "continuous_split", "integer_split",
    "split_batch",
]

#: Default limit on gradient-accumulation micro-steps per device and step.
DEFAULT_MAX_MICRO_STEPS = 8
#: Enumerate every class-count vector when there are at most this many.
DEFAULT_EXACT_LIMIT = 256
_REL_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class DpDevice:
    """One GPU offered to the job: its cost and the server it sits in."""

    cost: DeviceCost
    node: Node


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """One device's part of a plan."""

    flavor: GpuFlavor
    node_id: str
    local_bsz: int
    micro_steps: int
    compute_time_s: float


@dataclass(frozen=True, slots=True)
class DroppedClass:
    """Devices of one class left out of the plan, and why."""

    flavor: GpuFlavor
    node_id: str
    count: int
    reason: str


@dataclass(frozen=True, slots=True)
class DpPlan:
    """A data-parallel split and its predicted cost.

    Attributes:
        global_bsz: samples per step.
        shares: the devices used, with their local batches.
        dropped: devices left idle, grouped, each with a reason.
        compute_time_s: slowest device's compute time (integer split).
        continuous_compute_time_s: the continuous optimum T* for the devices used.
        allreduce_time_s: gradient all-reduce time over the devices used (with compression:
            the compressed exchange, wire time plus codec compute,
            :func:`tessera.perf.compression.exchange_time_s`).
        bound_samples_per_s: sum of every offered device's best standalone throughput.
        compression: the gradient compression scheme the plan was costed with.
    """

    global_bsz: int
    shares: tuple[DeviceShare, ...]
    dropped: tuple[DroppedClass, ...]
    compute_time_s: float
    continuous_compute_time_s: float
    allreduce_time_s: float
    bound_samples_per_s: float
    compression: str = "none"

    @property
    def step_time_s(self) -> float:
        return self.compute_time_s + self.allreduce_time_s

    @property
    def throughput_samples_per_s(self) -> float:
        return self.global_bsz / self.step_time_s

    @property
    def efficiency(self) -> float:
        """Throughput over the sum-of-standalone-throughputs bound."""
        return self.throughput_samples_per_s / self.bound_samples_per_s


# ---------------------------------------------------------------------------------------------
# Choosing the devices


@dataclass(frozen=True, slots=True)
class _Class:
    """Identical devices: same cost, same server (so interchangeable in every plan)."""

    cost: DeviceCost
    devices: tuple[DpDevice, ...]


def _classes(devices: Sequence[DpDevice]) -> list[_Class]:
    groups: dict[tuple[DeviceCost, str], list[DpDevice]] = {}
    for d in devices:
        groups.setdefault((d.cost, d.node.node_id), []).append(d)
    return [_Class(members[0].cost, tuple(members)) for members in groups.values()]


class _Evaluator:
    """Scores a class-count vector: continuous or exact integer compute, plus all-reduce.

    The continuous score is a lower bound on the integer one (T* ≤ T_int), which lets the
    search skip integer evaluations that cannot win.
    """

    def __init__(self, classes: list[_Class], global_bsz: int, grad_bytes: float,
                 max_micro_steps: int, compression: CompressionSpec | None = None) -> None:
        self.classes = classes
        self.costs = [c.cost for c in classes]
        self.global_bsz = global_bsz
        self.grad_bytes = grad_bytes
        self.k = max_micro_steps
        self.compression = compression or CompressionSpec()
        self._cont: dict[tuple[int, ...], float] = {}
        self._int: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {}

    def chosen(self, counts: Sequence[int]) -> list[DpDevice]:
        return [d for cl, n in zip(self.classes, counts, strict=True) for d in cl.devices[:n]]

    def comm_s(self, counts: Sequence[int]) -> float:
        per_node: dict[str, tuple[Node, int]] = {}
        for cl, n in zip(self.classes, counts, strict=True):
            if n:
                node = cl.devices[0].node
                per_node[node.node_id] = (node, per_node.get(node.node_id, (node, 0))[1] + n)
        flavors = [cl.cost.flavor for cl, n in zip(self.classes, counts, strict=True) if n]
        return exchange_time_s(self.compression, self.grad_bytes,
                               ring_over_nodes(list(per_node.values())), flavors)

    def feasible(self, counts: Sequence[int]) -> bool:
        per_pass = sum(n * c.max_local_bsz for c, n in zip(self.costs, counts, strict=True))
        return sum(counts) > 0 and per_pass * self.k >= self.global_bsz

    def continuous(self, counts: tuple[int, ...]) -> float:
        if counts not in self._cont:
            if not self.feasible(counts):
                self._cont[counts] = math.inf
            else:
                t, _ = continuous_split(self.costs, counts, self.global_bsz, self.k)
                self._cont[counts] = t + self.comm_s(counts)
        return self._cont[counts]

    def integer(self, counts: tuple[int, ...]) -> tuple[float, tuple[int, ...]]:
        if counts not in self._int:
            if not self.feasible(counts):
                self._int[counts] = (math.inf, ())
            else:
                _, per_class = continuous_split(self.costs, counts, self.global_bsz, self.k)
                costs = [c for c, n in zip(self.costs, counts, strict=True) for _ in range(n)]
                start = [x for x, n in zip(per_class, counts, strict=True) for _ in range(n)]
                b = integer_split(costs, self.global_bsz, self.k, start)
                compute = max(c.step_time_s(x) for c, x in zip(costs, b, strict=True))
                self._int[counts] = (compute + self.comm_s(counts), b)
        return self._int[counts]

    def best_integer(self, candidates: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        """The candidate with the smallest integer score (fewest devices on ties).

        Candidates are visited by continuous score; once that lower bound exceeds the best
        integer score found, no later candidate can win.
        """
        best: tuple[float, int, tuple[int, ...]] = (math.inf, 0, candidates[0])
        for cnt in sorted(candidates, key=self.continuous):
            if self.continuous(cnt) > best[0] * (1 + _REL_EPS):
                break
            best = min(best, (self.integer(cnt)[0], sum(cnt), cnt))
        return best[2]


def choose_counts(ev: _Evaluator, exact_limit: int) -> tuple[int, ...]:
    """Pick how many devices of each class to use (see the module docstring)."""
    full = tuple(len(c.devices) for c in ev.classes)
    if math.prod(n + 1 for n in full) <= exact_limit:
        return ev.best_integer(list(product(*(range(n + 1) for n in full))))
    k = len(full)
    if k <= 6:
        starts = [tuple(n if (mask >> i) & 1 else 0 for i, n in enumerate(full))
                  for mask in range(1, 2**k)]
    else:
        starts = [full] + [tuple(0 if i == j else n for i, n in enumerate(full))
                           for j in range(k)]
    best = min(starts, key=ev.continuous)
    while True:   # continuous local search, then integer
        nxt = min(_neighbours(best, full), key=ev.continuous, default=best)
        if ev.continuous(nxt) >= ev.continuous(best) * (1 - _REL_EPS):
            break
        best = nxt
    while True:
        nxt = ev.best_integer([best, *_neighbours(best, full)])
        if nxt == best:
            return best
        best = nxt


def _neighbours(counts: tuple[int, ...], full: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Count vectors one device away: one device more or fewer of a class, or one device
    swapped from one class to another. Swaps matter when few devices are worth using (a
    batch of one sample runs on one device: from "one slow device" the faster class is a swap
    away, while adding it first costs a cross-node all-reduce and removing the slow one first
    leaves nothing)."""
    out = []
    for i in range(len(full)):
        for delta in (-1, 1):
            n = counts[i] + delta
            if 0 <= n <= full[i]:
                out.append((*counts[:i], n, *counts[i + 1:]))
    for i in range(len(full)):
        if counts[i] == 0:
            continue
        for j in range(len(full)):
            if j != i and counts[j] < full[j]:
                swapped = list(counts)
                swapped[i] -= 1
                swapped[j] += 1
                out.append(tuple(swapped))
    return out


def split_batch(
    devices: Sequence[DpDevice], global_bsz: int, grad_bytes: float, *,
    max_micro_steps: int = DEFAULT_MAX_MICRO_STEPS, exact_limit: int = DEFAULT_EXACT_LIMIT,
    compression: CompressionSpec | None = None,
) -> DpPlan:
    """Plan a data-parallel step of ``global_bsz`` samples over ``devices``.

    Args:
        devices: the GPUs offered, each with its step-time cost and node.
        global_bsz: samples per optimizer step.
        grad_bytes: gradient bytes all-reduced per step.
        max_micro_steps: gradient-accumulation limit per device.
        exact_limit: enumerate device counts exactly up to this many combinations.
        compression: cost the gradient exchange with this scheme (default: plain fp32).

    Raises:
        SpecError: no devices, or a non-positive batch.
        BatchTooLargeError: ``global_bsz`` cannot fit even with accumulation; says the minimum.
    """
    if not devices:
        raise SpecError("no devices to plan over")
    if global_bsz < 1:
        raise SpecError(f"global batch must be a positive integer, got {global_bsz}")
    if max_micro_steps < 1:
        raise SpecError("max_micro_steps must be at least 1")
    classes = _classes(devices)
    ev = _Evaluator(classes, global_bsz, grad_bytes, max_micro_steps, compression)
    full = tuple(len(c.devices) for c in classes)
    if not ev.feasible(full):
        per_pass = sum(d.cost.max_local_bsz for d in devices)
        raise BatchTooLargeError(global_bsz, per_pass, max_micro_steps)
    counts = choose_counts(ev, exact_limit)
    total_s, batches = ev.integer(counts)
    chosen = ev.chosen(counts)
    t_cont, _ = continuous_split([c.cost for c in classes], counts, global_bsz, max_micro_steps)
    shares = tuple(
        DeviceShare(d.cost.flavor, d.node.node_id, b,
                    max(1, math.ceil(b / d.cost.max_local_bsz)) if b else 0,
                    d.cost.step_time_s(b))
        for d, b in zip(chosen, batches, strict=True)
    )
    comm = ev.comm_s(counts)
    return DpPlan(
        global_bsz=global_bsz, shares=shares,
        dropped=_explain_dropped(ev, counts, total_s),
        compute_time_s=total_s - comm, continuous_compute_time_s=t_cont, allreduce_time_s=comm,
        bound_samples_per_s=sum(d.cost.best_rate_samples_per_s() for d in devices),
        compression=str(ev.compression),
    )


def _explain_dropped(ev: _Evaluator, counts: tuple[int, ...], total_s: float
                     ) -> tuple[DroppedClass, ...]:
    out = []
    for i, cl in enumerate(ev.classes):
        missing = len(cl.devices) - counts[i]
        if missing == 0:
            continue
        with_all = (*counts[:i], len(cl.devices), *counts[i + 1:])
        alt_s, _ = ev.integer(with_all)
        c = cl.cost
        reason = (f"using all {len(cl.devices)} would make a step {alt_s:.4f} s instead of "
                  f"{total_s:.4f} s (compute plus all-reduce over "
                  f"{sum(with_all)} GPUs)")
        if c.alpha_s >= total_s:
            reason += f"; its fixed cost alone (alpha {c.alpha_s:.4f} s) exceeds the step"
        out.append(DroppedClass(c.flavor, cl.devices[0].node.node_id, missing, reason))
    return tuple(out)
