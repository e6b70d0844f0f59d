"""Transient stragglers: which rank is slow in which step, and a slowdown that can be cut short.

A *transient* straggler is a rank that is slow for one step (a noisy neighbour, thermal
throttling, a shared host) and normal again the next; the online balancer only reacts to
slowness that persists. ``tessera train --stragglers P --seed S`` injects them: on each
(rank, step), with probability ``P``, the rank's compute takes ``factor`` (default 3) times as
long.

The draw is a pure function of ``(seed, step, rank)`` (:func:`is_straggler`), so every rank
computes the same schedule without exchanging a message, a rerun with the same seed is slowed
at the same places, and a test can ask which rank-steps will be slow before launching.

The slowdown itself is a wait (:class:`Slowdown`): on an emulated device the rank's nominal
compute time is multiplied by ``factor`` (:mod:`tessera.train.emulation`), on a real device the
rank sleeps ``(factor − 1)`` times its measured compute. Either way the extra time is spent in
:meth:`Slowdown.wait`, which polls a predicate and returns early when it turns true: a coded step
(:mod:`tessera.train.coded`) passes "the step has been decided without me", so a straggler
abandons work nobody needs any more.

Validation of the straggler, coding and staleness options lives here too
(:func:`check_straggler_options`), so ``TrainConfig`` rejects bad input before any rank starts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tessera.errors import SpecError

DEFAULT_FACTOR = 3.0
"""How many times slower a straggling rank's compute is (the issue's 3×)."""
POLL_S = 0.0005
"""How often a waiting rank looks at its predicate (0.5 ms: small against emulated steps)."""


def is_straggler(seed: int, step: int, rank: int, rate: float) -> bool:
    """Whether ``rank`` straggles in ``step``: true with probability ``rate``, reproducibly.

    A fresh generator seeded by the string ``"seed:step:rank"`` (Python hashes string seeds with
    SHA-512, independent of ``PYTHONHASHSEED``) gives one uniform draw; every process computes
    the same answer.
    """
    if rate <= 0.0:
        return False
    if rate >= 1.0:
        return True
    return random.Random(f"tessera-straggler:{seed}:{step}:{rank}").random() < rate


def straggler_schedule(seed: int, steps: int, ranks: int, rate: float) -> list[list[int]]:
    """For each step, the ranks that straggle in it (for tests, benchmarks and docs)."""
    return [[r for r in range(ranks) if is_straggler(seed, s, r, rate)] for s in range(steps)]


@dataclass(frozen=True, slots=True)
class Stragglers:
    """The injection of one run.

    Attributes:
        rate: probability that a (rank, step) is slowed, in ``[0, 1]``.
        factor: how many times longer a slowed rank's compute takes (≥ 1).
        seed: the run's seed (the draw also depends on step and rank).
    """

    rate: float = 0.0
    factor: float = DEFAULT_FACTOR
    seed: int = 0

    def factor_at(self, step: int, rank: int) -> float:
        """``factor`` if ``rank`` straggles in ``step``, else 1."""
        return self.factor if is_straggler(self.seed, step, rank, self.rate) else 1.0


class Slowdown:
    """A wait until a deadline (a ``time.perf_counter`` value) that a predicate may cut short."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s

    @classmethod
    def after_compute(cls, started_s: float, compute_s: float, factor: float) -> Slowdown:
        """The deadline of a real device's slowed step: ``factor × compute_s`` after start."""
        return cls(started_s + factor * compute_s)

    def done(self) -> bool:
        """Whether the deadline has passed."""
        return time.perf_counter() >= self.deadline_s

    def wait(self, cancel: Callable[[], bool] | None = None) -> bool:
        """Sleep until the deadline; with ``cancel``, poll it and stop early when it is true.

        Returns:
            ``True`` if the wait ran to its deadline, ``False`` if it was cancelled.
        """
        while True:
            remaining = self.deadline_s - time.perf_counter()
            if remaining <= 0:
                return True
            if cancel is None:
                time.sleep(remaining)
                return True
            if cancel():
                return False
            time.sleep(min(POLL_S, remaining))


def check_straggler_options(*, ranks: int, rate: float, factor: float, coded: bool,
                            code_k: int | None, staleness: int) -> None:
    """Reject impossible straggler, coding and staleness options with a one-line error.

    Raises:
        SpecError: a rate outside ``[0, 1]``, a factor below 1, ``--coded`` with one rank,
            ``k`` outside ``[1, n]``, ``k`` without ``--coded``, ``k = n`` without a staleness
            to fall back on, or a negative staleness.
    """
    if not 0.0 <= rate <= 1.0:
        raise SpecError(f"straggler rate must be in [0, 1], got {rate:g}")
    if not factor >= 1.0:
        raise SpecError(f"straggler factor must be ≥ 1, got {factor:g}")
    if staleness < 0:
        raise SpecError(f"staleness must be ≥ 0 steps, got {staleness}")
    if code_k is not None and not coded:
        raise SpecError("a code size k (--code-k) needs --coded")
    if not coded:
        return
    if ranks < 2:
        raise SpecError("--coded needs at least 2 ranks (any k of n ranks complete a step)")
    if code_k is not None and not 1 <= code_k <= ranks:
        raise SpecError(f"code k must be between 1 and the {ranks} ranks, got k = {code_k}")
    if code_k == ranks and staleness == 0:
        raise SpecError(f"code k = n = {ranks} tolerates no straggler; use a smaller --code-k "
                        "or add --staleness S (bounded staleness, the fallback)")
