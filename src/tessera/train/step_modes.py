"""Which step a run takes (synchronous, coded, bounded staleness), and straggler slowdown.

The worker's synchronous step (:func:`tessera.train.worker._train_step`) stays the default;
``TrainConfig.step_mode`` selects a straggler-tolerant one instead:

* ``coded`` -- :class:`~tessera.train.coded_step.CodedStepper` (``--coded``, k < n);
* ``stale`` -- :class:`~tessera.train.staleness.StaleStepper` (``--staleness S`` with S > 0,
  where coding is off or cannot apply, e.g. ``--coded --code-k N`` on N ranks).

Both need a process group of at least two ranks; on one rank every mode is the plain step.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from tessera.train.coded_step import CodedStepper
from tessera.train.config import TrainConfig
from tessera.train.p2p_step import StepRun
from tessera.train.staleness import StaleStepper
from tessera.train.stragglers import Slowdown


class Stepper(Protocol):
    """A straggler-tolerant step runner of one rank."""

    def step(self, step: int, attempt: int, stop: bool) -> tuple[dict[str, Any], bool]:
        """Run one step; return its log record and whether every rank stops after it."""
        ...

    def close(self) -> None:
        """Finish the messages still in flight (before leaving the process group)."""
        ...


def make_stepper(run: StepRun) -> Stepper | None:
    """The run's straggler-tolerant stepper, or ``None`` for the synchronous step."""
    if run.world_size < 2:
        return None
    mode = run.cfg.step_mode
    if mode == "coded":
        return CodedStepper(run)
    if mode == "stale":
        return StaleStepper(run)
    return None


def slow_down(cfg: TrainConfig, step: int, rank: int, started_s: float,
              compute_s: float) -> float:
    """A synchronous step's injected straggler: stretch the compute to ``factor`` times.

    Args:
        started_s: when the step's compute began (``time.perf_counter``).
        compute_s: its compute time so far (emulated: already padded to the nominal time).

    Returns:
        The compute time including the slowdown (``compute_s`` when not a straggler).
    """
    factor = cfg.straggler_injection.factor_at(step, rank)
    if factor <= 1.0:
        return compute_s
    Slowdown.after_compute(started_s, compute_s, factor).wait()
    return time.perf_counter() - started_s
