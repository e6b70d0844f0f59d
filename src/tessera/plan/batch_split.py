"""Splitting a global batch over a *fixed* set of GPUs: the continuous and the integer optimum.

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

Which devices to use at all (a device that takes samples also joins the all-reduce ring) is
the planner's choice in :mod:`tessera.plan.dp`, which calls these splits for each candidate
set.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from tessera.errors import SpecError
from tessera.perf.steptime import DeviceCost


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
