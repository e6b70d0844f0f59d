"""Online batch balancing for heterogeneous data parallelism, from measured step times.

In synchronous data parallelism every rank waits for the slowest one at the gradient all-reduce,
so a step takes ``max_i t_i(b_i)``. Give a fast GPU a bigger share of the global batch ``B`` and a
slow one a smaller share, and all ranks finish together.

**Model.** Each rank's compute time for a local batch of ``b`` samples is close to linear,
``t_i(b) = α_i + β_i·b`` (a fixed overhead plus a per-sample cost). With that model the split that
makes every rank finish at the same time ``T`` has a closed form::

    b_i = (T − α_i) / β_i,   Σ b_i = B   ⇒   T = (B + Σ α_i/β_i) / Σ 1/β_i

Batches must be integers, so :func:`balanced_split` starts from the floors of that solution and
hands out the remaining samples one at a time to the rank whose ``t_i(b_i + 1)`` is smallest
(greedy min-max; optimal for non-decreasing ``t_i``).

**Measurement, not belief.** The runtime reports every rank's compute time each step (the time
from the start of the step to the gradient all-reduce, so waiting for others is excluded).
:class:`OnlineBalancer` fits ``α_i, β_i`` per rank by least squares over a short window of
``(b, t)`` pairs. While a rank has only ever run one batch size, ``α_i`` cannot be told apart from
``β_i`` and the fit falls back to ``α_i = 0`` (time proportional to batch); the first re-split
then gives it a second batch size and the fit becomes exact.

**Dead-band.** Re-splitting has a cost (a new batch shape, noise in the next estimate), and noisy
timings would make a greedy balancer oscillate. A new split is adopted only when its predicted
step time beats the current split's by more than ``deadband`` (a few per cent), as Cannikin's
prototype does.

**Change detection.** Speeds change at run time (another tenant lands on the GPU, a clock
throttles). When a rank's last ``confirm_steps`` measurements all miss the prediction of its older
history by more than ``change_tol`` in the same direction, its history is dropped and rebuilt from
those recent measurements, so the next decision sees the new speed within a few steps.

Everything here is pure Python and deterministic: every rank feeds the same all-reduced timings
to its own balancer and reaches the same decision without extra communication.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tessera.errors import SpecError


@dataclass(frozen=True, slots=True)
class StepModel:
    """A rank's compute time as a function of its local batch: ``alpha_s + beta_s * b``.

    Attributes:
        alpha_s: fixed per-step overhead in seconds (kernel launches, optimizer, Python).
        beta_s: cost of one more sample in seconds.
    """

    alpha_s: float
    beta_s: float

    def step_s(self, batch: int) -> float:
        """Predicted compute time for a local batch of ``batch`` samples."""
        return self.alpha_s + self.beta_s * batch


def fit_step_model(batches: Sequence[int], times_s: Sequence[float]) -> StepModel:
    """Least-squares fit of ``t = α + β·b`` to observations, with ``α ≥ 0`` and ``β > 0``.

    With a single distinct batch size the intercept is unidentifiable and the fit is
    proportional (``α = 0``, ``β = mean(t)/b``).

    Raises:
        ValueError: no observations, or a non-positive batch.
    """
    if not batches or len(batches) != len(times_s):
        raise ValueError("need at least one (batch, time) observation")
    if min(batches) <= 0:
        raise ValueError("batch sizes must be positive")
    n = len(batches)
    mean_b = sum(batches) / n
    mean_t = sum(times_s) / n
    var_b = sum((b - mean_b) ** 2 for b in batches)
    if var_b > 0:
        cov = sum((b - mean_b) * (t - mean_t) for b, t in zip(batches, times_s, strict=True))
        beta = cov / var_b
        alpha = mean_t - beta * mean_b
        if beta > 0 and alpha >= 0:
            return StepModel(alpha, beta)
    # Proportional fallback: the least-squares slope through the origin.
    beta = sum(b * t for b, t in zip(batches, times_s, strict=True)) / sum(b * b for b in batches)
    return StepModel(0.0, max(beta, 1e-12))


def robust_fit(observations: Sequence[tuple[int, float]]) -> StepModel:
    """Fit a step model to the *median* time of each batch size seen.

    On a shared machine a single step can take much longer than usual (the process was
    descheduled); medians per batch size keep one such spike from moving the split.
    """
    by_batch: dict[int, list[float]] = {}
    for b, t in observations:
        by_batch.setdefault(b, []).append(t)
    batches = sorted(by_batch)
    return fit_step_model(batches, [statistics.median(by_batch[b]) for b in batches])


def balanced_split(models: Sequence[StepModel], global_batch: int, min_batch: int = 1
                   ) -> tuple[int, ...]:
    """Integer local batches summing to ``global_batch`` that minimise the slowest rank's time.

    Args:
        models: one fitted step model per rank.
        global_batch: ``B``, kept fixed so the learning rate stays valid.
        min_batch: smallest batch any rank gets (1 keeps every rank measured).

    Raises:
        SpecError: ``global_batch`` is smaller than ``min_batch`` times the number of ranks.
    """
    n = len(models)
    if global_batch < min_batch * n:
        raise SpecError(
            f"global batch {global_batch} is too small for {n} ranks "
            f"with at least {min_batch} sample(s) each"
        )
    inv_beta = [1.0 / m.beta_s for m in models]
    overheads = sum(m.alpha_s * w for m, w in zip(models, inv_beta, strict=True))
    t_star = (global_batch + overheads) / sum(inv_beta)
    start = [max(min_batch, math.floor((t_star - m.alpha_s) / m.beta_s)) for m in models]
    if sum(start) > global_batch:
        start = [min_batch] * n
    split = list(start)
    heap = [(m.step_s(b + 1), i) for i, (m, b) in enumerate(zip(models, split, strict=True))]
    heapq.heapify(heap)
    for _ in range(global_batch - sum(split)):
        _, i = heapq.heappop(heap)
        split[i] += 1
        heapq.heappush(heap, (models[i].step_s(split[i] + 1), i))
    return tuple(split)


def equal_split(global_batch: int, world_size: int) -> tuple[int, ...]:
    """Plain data parallelism: ``B/N`` each, the remainder to the lowest ranks."""
    if world_size <= 0 or global_batch < world_size:
        raise SpecError(f"global batch {global_batch} cannot be split over {world_size} ranks")
    q, r = divmod(global_batch, world_size)
    return tuple(q + (1 if i < r else 0) for i in range(world_size))


def proportional_split(speeds: Sequence[float], global_batch: int, min_batch: int = 1
                       ) -> tuple[int, ...]:
    """A prior split proportional to relative speeds (used before anything is measured)."""
    return balanced_split([StepModel(0.0, 1.0 / s) for s in speeds], global_batch, min_batch)


def predicted_step_s(models: Sequence[StepModel], split: Sequence[int]) -> float:
    """A synchronous step lasts as long as its slowest rank: ``max_i t_i(b_i)``."""
    return max(m.step_s(b) for m, b in zip(models, split, strict=True))


@dataclass(frozen=True, slots=True)
class BalancerConfig:
    """Knobs of :class:`OnlineBalancer`.

    Attributes:
        deadband: adopt a new split only if it cuts the predicted step time by more than this
            fraction (0.05 = 5 %).
        window_steps: observations kept per rank for the fit.
        change_tol: relative miss of the prediction that counts as a speed change.
        confirm_steps: consecutive misses (same direction) needed to declare a change.
        warmup_steps: first steps ignored (start-up costs distort them).
        min_batch: smallest local batch.
    """

    deadband: float = 0.05
    window_steps: int = 8
    change_tol: float = 0.2
    confirm_steps: int = 2
    warmup_steps: int = 1
    min_batch: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.deadband < 1:
            raise SpecError(f"deadband must be in [0, 1), got {self.deadband}")
        if self.window_steps < 2 or self.confirm_steps < 1:
            raise SpecError("window_steps must be ≥ 2 and confirm_steps ≥ 1")
        if self.confirm_steps >= self.window_steps:
            raise SpecError("confirm_steps must be smaller than window_steps")


@dataclass(frozen=True, slots=True)
class Rebalance:
    """One adopted re-split, applied from the step after ``step``.

    Attributes:
        step: the step whose measurements triggered it.
        old_split / new_split: local batches per rank before and after.
        predicted_old_s / predicted_new_s: modelled step time of each split.
        reason: why the balancer looked (first measurement, a detected speed change, drift).
    """

    step: int
    old_split: tuple[int, ...]
    new_split: tuple[int, ...]
    predicted_old_s: float
    predicted_new_s: float
    reason: str

    @property
    def predicted_gain(self) -> float:
        """Fractional reduction of the predicted step time."""
        return 1.0 - self.predicted_new_s / self.predicted_old_s

    def to_json(self) -> dict[str, Any]:
        """The event as a step record in ``result.json`` carries it (splits as lists)."""
        return {
            "step": self.step, "old_split": list(self.old_split),
            "new_split": list(self.new_split), "predicted_old_s": self.predicted_old_s,
            "predicted_new_s": self.predicted_new_s, "reason": self.reason,
        }


class OnlineBalancer:
    """Keeps the batch split balanced from per-rank compute times measured every step.

    Call :meth:`observe` once per step with every rank's compute time for the current
    :attr:`split`; it returns a :class:`Rebalance` when it adopts a new split.
    """

    def __init__(self, global_batch: int, initial_split: Sequence[int],
                 config: BalancerConfig | None = None) -> None:
        if sum(initial_split) != global_batch or min(initial_split) < 0:
            raise SpecError(f"split {list(initial_split)} does not add up to {global_batch}")
        self.global_batch = global_batch
        self.config = config or BalancerConfig()
        self._split = tuple(initial_split)
        self._history: list[deque[tuple[int, float]]] = [
            deque(maxlen=self.config.window_steps) for _ in initial_split
        ]
        self._pending_reason = "first measurements"

    @property
    def split(self) -> tuple[int, ...]:
        """Local batch per rank for the next step."""
        return self._split

    def models(self) -> list[StepModel] | None:
        """Current fitted step model per rank, or ``None`` before every rank was measured."""
        out = []
        for hist in self._history:
            obs = [(b, t) for b, t in hist if b > 0]
            if not obs:
                return None
            out.append(robust_fit(obs))
        return out

    def observe(self, step: int, compute_s: Sequence[float]) -> Rebalance | None:
        """Record one step's per-rank compute times; maybe adopt a better split."""
        if len(compute_s) != len(self._split):
            raise ValueError(f"expected {len(self._split)} times, got {len(compute_s)}")
        if step < self.config.warmup_steps:
            return None
        for hist, b, t in zip(self._history, self._split, compute_s, strict=True):
            hist.append((b, float(t)))
        changed = self._detect_changes()
        if changed:
            self._pending_reason = changed
        models = self.models()
        if models is None:
            return None
        current = predicted_step_s(models, self._split)
        proposal = balanced_split(models, self.global_batch, self.config.min_batch)
        proposed = predicted_step_s(models, proposal)
        if proposal == self._split or proposed >= current * (1.0 - self.config.deadband):
            return None
        event = Rebalance(step, self._split, proposal, current, proposed,
                          self._pending_reason)
        self._split = proposal
        self._pending_reason = "drift"
        return event

    def _detect_changes(self) -> str:
        """Reset the history of ranks whose recent times left their model; describe them."""
        k = self.config.confirm_steps
        notes = []
        for rank, hist in enumerate(self._history):
            if len(hist) <= k:
                continue
            older = [(b, t) for b, t in list(hist)[:-k] if b > 0]
            recent = [(b, t) for b, t in list(hist)[-k:] if b > 0]
            if not older or len(recent) < k:
                continue
            model = robust_fit(older)
            misses = [t / model.step_s(b) - 1.0 for b, t in recent]
            same_sign = all(m > 0 for m in misses) or all(m < 0 for m in misses)
            if same_sign and min(abs(m) for m in misses) > self.config.change_tol:
                hist.clear()
                hist.extend(recent)
                mean_miss = sum(misses) / len(misses)
                notes.append(f"rank {rank} step time changed {mean_miss:+.0%}")
        return "; ".join(notes)

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state, saved in checkpoints so a resumed run decides identically."""
        return {
            "global_batch": self.global_batch,
            "config": asdict(self.config),
            "split": list(self._split),
            "history": [[list(o) for o in h] for h in self._history],
            "pending_reason": self._pending_reason,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> OnlineBalancer:
        """Rebuild a balancer saved by :meth:`state_dict`."""
        bal = cls(int(state["global_batch"]), [int(b) for b in state["split"]],
                  BalancerConfig(**state["config"]))
        for hist, obs in zip(bal._history, state["history"], strict=True):
            hist.extend((int(b), float(t)) for b, t in obs)
        bal._pending_reason = str(state["pending_reason"])
        return bal
