"""When failing runs fail: the Philly study's shape, drawn per (job, attempt).

Jeon et al. (ATC'19, §4) find that about 30 % of Philly jobs fail or are killed, that most
failures are user or programming errors (bad inputs, syntax and library errors, out of memory)
rather than infrastructure, that failures repeat for the same job and user, and that while many
failures strike within minutes of starting, others strike late and waste many GPU-hours. Their
guideline: catch failures early by validating a job on a little hardware before it starts on
the whole gang. The public job table carries no status or time-to-failure, so the split below
is a *model* with documented knobs, not a fit (``docs/lessons.md``):

* a share ``job_failure_rate`` of jobs is flaky (chosen by the simulator's flaky stream);
* attempt 0 of a flaky job always fails; a later attempt fails with ``repeat_probability``
  (repeats per job);
* a failing attempt is *early* with probability ``early_share``: it fails ``U(0,
  early_window_s)`` seconds after its run starts (bugs); otherwise it is *late*: it fails at a
  uniform fraction of the work it had left when the run started.

Each (job, attempt) draws from its own stream, seeded from the simulation seed, the job index
and the attempt number, so two simulations that schedule differently (say with and without
pre-run validation) see exactly the same failures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tessera.sim.config import FailureConfig


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """How one attempt of a job fails.

    Attributes:
        early: a bug that strikes soon after the run starts.
        offset_s: for an early failure, seconds of running (after restore) before it strikes.
        fraction: for a late failure, the share of the remaining work done before it strikes.
    """

    early: bool
    offset_s: float = 0.0
    fraction: float = 0.0

    def after_s(self, run_s: float) -> float | None:
        """Seconds into a run of ``run_s`` seconds at which it fails (``None``: it finishes)."""
        at = self.offset_s if self.early else self.fraction * run_s
        return at if at < run_s else None


class FailureModel:
    """The ``early-late`` time-to-failure model (see the module docstring)."""

    def __init__(self, cfg: FailureConfig, seed: int) -> None:
        self.cfg = cfg
        self.seed = seed

    def draw(self, job_idx: int, attempt: int) -> AttemptFailure | None:
        """How attempt ``attempt`` of flaky job ``job_idx`` fails, or ``None`` if it does not."""
        rng = random.Random(f"tessera-fail:{self.seed}:{job_idx}:{attempt}")
        fails = rng.random()
        if attempt > 0 and fails >= self.cfg.repeat_probability:
            return None
        if rng.random() < self.cfg.early_share:
            return AttemptFailure(True, offset_s=rng.random() * self.cfg.early_window_s)
        return AttemptFailure(False, fraction=rng.random())
