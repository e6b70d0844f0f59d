"""Heterogeneous data-parallel split: how many samples each GPU takes per step.

**The problem.** A job trains with a global batch of B samples per step on a mixed set of GPUs.
Every GPU computes gradients on its own *local batch* b_i, then all of them average gradients
(a ring all-reduce) and step together, so the step lasts as long as the slowest GPU::

    step_time = max_i t_i(b_i) + t_allreduce(active GPUs),     Σ_i b_i = B

Device i's compute time is ``t_i(b) = α_i·⌈b / cap_i⌉ + β_i·b`` (:class:`DeviceCost`): a fixed
cost α per micro-step, a per-sample cost β, and ``cap_i`` samples fitting in memory at once. A
device given more than cap_i samples runs ``⌈b / cap_i⌉`` micro-steps and accumulates gradients
(PyTorch ``no_sync()``), paying α each time. An idle device costs nothing (t_i(0) = 0).

**Continuous optimum.** Relax b_i to reals. The best split makes every busy device finish at
the same time T: device i can process ``c_i(T) = sup{b ≤ k_max·cap_i : t_i(b) ≤ T}`` samples,
and T* is the smallest T with ``Σ c_i(T) ≥ B``. ``c_i`` is piecewise linear (rising with slope
1/β_i while inside a micro-step, flat while the next micro-step's α is being paid), so T* is
found by bisecting the breakpoints of ``Σ c_i(T)`` and interpolating linearly between two of
them. Each breakpoint's value is evaluated directly, with a finished micro-step counted as
exactly cap_i samples: on a plateau ``Σ c_i`` is then an exact integer, and a B that equals
it is reached at the plateau's start, not one α later. Without caps this is the closed form
``T* = (B + Σ α_i/β_i) / Σ 1/β_i``; caps give water-filling, and a device with α_i ≥ T* gets
nothing.

**Integer rounding, and its bound.** Start from ``f_i = ⌊b_i*⌋`` (at most n samples short), then
hand out the missing samples one at a time, each to the device whose ``t_i(f_i + 1)`` is
smallest. Because every t_i is non-decreasing this greedy is *exactly* optimal for
``min max_i t_i(b_i)`` over integers: while fewer than B samples are placed, some device has
fewer than an optimal integer split gives it, so the cheapest next sample costs at most the
integer optimum T_int, and the floors start at most at T* ≤ T_int. The result also satisfies::

    T* ≤ T_int ≤ T* + max{β_i : b_i* > 0}

since rounding every busy b_i* up to ⌈b_i*⌉ stays inside its micro-step (caps are integers) and
adds less than one sample's β_i, and a split with Σ = B lies below those ceilings.

**Dropping devices.** A device that takes samples also joins the all-reduce ring, which adds
2(n−1) latency steps and may put a slow link (a PCIe box, an Ethernet hop) in the ring. So the
planner chooses *which* devices to use: identical devices (same cost, same server) form
classes; small instances (at most
``exact_limit`` class-count vectors) are enumerated exactly; larger ones start from every subset
of classes (or, with many classes, from all and each leave-one-class-out) and improve by local
search, adding or removing one device at a time (first scored by the continuous optimum,
then by the exact integer split). Tests compare against brute force over every
subset and every integer split.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

from tessera.errors import SpecError
from tessera.model.cluster import Node
from tessera.model.gpus import GpuFlavor
from tessera.perf.comm import allreduce_time_s, ring_over_nodes
from tessera.perf.steptime import DeviceCost

#: Default limit on gradient-accumulation micro-steps per device and step.
DEFAULT_MAX_MICRO_STEPS = 8
#: Enumerate every class-count vector when there are at most this many.
DEFAULT_EXACT_LIMIT = 256
_REL_EPS = 1e-12


class BatchTooLargeError(SpecError):
    """The global batch exceeds what the devices hold with the allowed accumulation."""

    def __init__(self, global_bsz: int, per_pass: int, max_micro_steps: int) -> None:
        self.global_bsz = global_bsz
        self.per_pass_bsz = per_pass
        self.min_micro_steps = math.ceil(global_bsz / per_pass) if per_pass else 0
        super().__init__(
            f"global batch {global_bsz} does not fit: these devices hold {per_pass} samples "
            f"per pass in memory, {per_pass * max_micro_steps} with {max_micro_steps} "
            f"accumulation micro-steps; it needs at least {self.min_micro_steps} micro-steps "
            f"(--max-micro-steps {self.min_micro_steps}), more devices, or a global batch "
            f"<= {per_pass * max_micro_steps}"
        )


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
        allreduce_time_s: gradient all-reduce time over the devices used.
        bound_samples_per_s: sum of every offered device's best standalone throughput.
    """

    global_bsz: int
    shares: tuple[DeviceShare, ...]
    dropped: tuple[DroppedClass, ...]
    compute_time_s: float
    continuous_compute_time_s: float
    allreduce_time_s: float
    bound_samples_per_s: float

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
# Continuous and integer splits for a fixed set of devices


def continuous_split(
    costs: Sequence[DeviceCost], counts: Sequence[int], global_bsz: float, max_micro_steps: int
) -> tuple[float, tuple[float, ...]]:
    """The continuous min-max split for ``counts[c]`` identical devices of class ``c``.

    ``S(T) = Σ_c counts[c]·c_c(T)`` is continuous, non-decreasing and linear between the
    micro-step breakpoints, so T* is found by bisecting the sorted breakpoints for the first
    one with ``S ≥ B`` and interpolating on the segment before it. ``S`` is evaluated afresh at
    every breakpoint, never accumulated as slope × duration: a finished micro-step counts as
    exactly ``cap`` samples. (Accumulating ``(1/β)·(β·cap)`` can give ``cap − 1 ulp``; when
    ``B`` equals the samples done when a plateau starts, the sweep then skipped the plateau,
    i.e. a whole α, and returned a T* far above the optimum.)

    Returns:
        ``(T*, b)``: the common finish time and each class's per-device batch.

    Raises:
        BatchTooLargeError: the devices cannot hold ``global_bsz`` even with accumulation.
    """
    per_pass = sum(n * c.max_local_bsz for c, n in zip(costs, counts, strict=True))
    if global_bsz > per_pass * max_micro_steps:
        raise BatchTooLargeError(int(global_bsz), per_pass, max_micro_steps)
    segs = [_segments(c, min(max_micro_steps, math.ceil(global_bsz / c.max_local_bsz)))
            for c in costs]

    def total(t_s: float) -> float:
        return sum(n * _capacity(c, sg, t_s)
                   for c, sg, n in zip(costs, segs, counts, strict=True) if n)

    times = sorted({t for sg, n in zip(segs, counts, strict=True) if n
                    for seg in sg for t in seg})
    if global_bsz <= 0 or not times:
        return 0.0, tuple(0.0 for _ in costs)
    lo, hi = 0, len(times) - 1          # first breakpoint with S ≥ B (S(last) = capacity ≥ B)
    while lo < hi:
        mid = (lo + hi) // 2
        if total(times[mid]) >= global_bsz:
            hi = mid
        else:
            lo = mid + 1
    t_hi, s_hi = times[lo], total(times[lo])
    t_lo = times[lo - 1] if lo else 0.0
    s_lo = total(t_lo) if lo else 0.0
    if s_hi <= global_bsz or s_hi <= s_lo:
        t_star = t_hi
    else:                               # S is linear on [t_lo, t_hi]
        t_star = min(t_hi, t_lo + (global_bsz - s_lo) * (t_hi - t_lo) / (s_hi - s_lo))
    return t_star, tuple(_capacity(c, sg, t_star) for c, sg in zip(costs, segs, strict=True))


def _segments(c: DeviceCost, k_max: int) -> list[tuple[float, float]]:
    """When device ``c`` computes micro-step k = 1..k_max: ``(kα + β(k−1)cap, kα + βk·cap)``."""
    span = c.beta_s_per_sample * c.max_local_bsz
    return [(k * c.alpha_s + (k - 1) * span, k * c.alpha_s + (k - 1) * span + span)
            for k in range(1, k_max + 1)]


def _capacity(c: DeviceCost, segs: Sequence[tuple[float, float]], t_s: float) -> float:
    """Samples device ``c`` processes within ``t_s`` (c_i(T) of the module docstring).

    A micro-step finished by ``t_s`` counts exactly ``cap`` samples (no rounding), so ``c_i`` is
    an exact integer on every plateau.
    """
    done = 0
    for start, end in segs:
        if t_s >= end:
            done += c.max_local_bsz
        elif t_s > start:
            return min(done + (t_s - start) / c.beta_s_per_sample, done + c.max_local_bsz)
        else:
            break
    return float(done)


def integer_split(
    costs: Sequence[DeviceCost], global_bsz: int, max_micro_steps: int,
    start: Sequence[float] | None = None,
) -> tuple[int, ...]:
    """The exact integer min-max split over individual devices (greedy from the floors).

    Args:
        costs: one entry per device.
        global_bsz: samples to place.
        max_micro_steps: accumulation limit per device.
        start: the continuous optimum per device; computed when omitted.
    """
    if start is None:
        _, per_class = continuous_split(costs, [1] * len(costs), global_bsz, max_micro_steps)
        start = per_class
    caps = [c.max_local_bsz * max_micro_steps for c in costs]
    b = [min(cap, math.floor(x + 1e-9)) for x, cap in zip(start, caps, strict=True)]
    while sum(b) > global_bsz:   # only after floating-point overshoot
        i = max(range(len(b)), key=lambda j: costs[j].step_time_s(b[j]) if b[j] else -1.0)
        b[i] -= 1
    heap = [(costs[i].step_time_s(b[i] + 1), i) for i in range(len(b)) if b[i] < caps[i]]
    heapq.heapify(heap)
    for _ in range(global_bsz - sum(b)):
        _, i = heapq.heappop(heap)
        b[i] += 1
        if b[i] < caps[i]:
            heapq.heappush(heap, (costs[i].step_time_s(b[i] + 1), i))
    return tuple(b)


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
                 max_micro_steps: int) -> None:
        self.classes = classes
        self.costs = [c.cost for c in classes]
        self.global_bsz = global_bsz
        self.grad_bytes = grad_bytes
        self.k = max_micro_steps
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
        return allreduce_time_s(self.grad_bytes, ring_over_nodes(list(per_node.values())))

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
    """Count vectors one device away."""
    out = []
    for i in range(len(full)):
        for delta in (-1, 1):
            n = counts[i] + delta
            if 0 <= n <= full[i]:
                out.append((*counts[:i], n, *counts[i + 1:]))
    return out


def split_batch(
    devices: Sequence[DpDevice], global_bsz: int, grad_bytes: float, *,
    max_micro_steps: int = DEFAULT_MAX_MICRO_STEPS, exact_limit: int = DEFAULT_EXACT_LIMIT,
) -> DpPlan:
    """Plan a data-parallel step of ``global_bsz`` samples over ``devices``.

    Args:
        devices: the GPUs offered, each with its step-time cost and node.
        global_bsz: samples per optimizer step.
        grad_bytes: gradient bytes all-reduced per step.
        max_micro_steps: gradient-accumulation limit per device.
        exact_limit: enumerate device counts exactly up to this many combinations.

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
    ev = _Evaluator(classes, global_bsz, grad_bytes, max_micro_steps)
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
