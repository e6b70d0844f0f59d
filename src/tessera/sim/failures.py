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

The default ``uniform`` model is simpler: attempt 0 of a flaky job fails (later attempts with
``repeat_probability``) at a uniform time within its run, drawn from one stream for the whole
simulation. :class:`FailureTimes` answers "when does this run fail?" under either model.
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


class FailureTimes:
    """When a flaky job's run fails, under the configured time model.

    Args:
        cfg: the failure settings (``time_model``: ``uniform`` or ``early-late``).
        seed: the simulation seed (the uniform model's stream is ``seed + 7919``).
    """

    def __init__(self, cfg: FailureConfig, seed: int) -> None:
        self.cfg = cfg
        self._rng = random.Random(seed + 7919)
        self._model = FailureModel(cfg, seed) if cfg.time_model == "early-late" else None

    def fail_at_s(
        self, job_idx: int, attempt: int, progress_from_s: float, finish_s: float,
        real_run_s: float | None,
    ) -> float | None:
        """The time a run fails, or ``None`` if it completes.

        Args:
            job_idx, attempt: which job and which of its attempts (``attempt`` failures so far).
            progress_from_s: when the run starts progressing (after any restore).
            finish_s: when the run would complete.
            real_run_s: for a run that is a pre-run validation, the length of the real run it
                stands for; ``None`` otherwise. Under ``early-late`` a late failure strikes the
                real run, not the validation, and an early one strikes the validation only if
                the real run would have lasted long enough to meet it.
        """
        run_s = finish_s - progress_from_s
        if self._model is not None:
            f = self._model.draw(job_idx, attempt)
            if f is None:
                return None
            if real_run_s is not None and (
                    not f.early or real_run_s <= 0 or f.after_s(real_run_s) is None):
                return None
            after = f.after_s(run_s)
            return None if after is None else progress_from_s + after
        if attempt == 0 or self._rng.random() < self.cfg.repeat_probability:
            return progress_from_s + self._rng.random() * run_s
        return None
