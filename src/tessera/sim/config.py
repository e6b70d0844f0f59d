"""Simulation settings, validated once; ``compat="gavel"`` reproduces Gavel's assumptions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FailureConfig(BaseModel):
    """Job failures (the Philly study: ~30 % of jobs fail or are killed, often late).

    A share ``job_failure_rate`` of jobs is *flaky*. Each run of a flaky job fails with
    probability ``repeat_probability`` (the first run always does) at a uniformly random point
    of its remaining work, losing the progress since its last checkpoint. A failed job retries
    after ``retry_delay_s`` while its retry budget lasts.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    job_failure_rate: float = Field(0.0, ge=0, le=1)
    repeat_probability: float = Field(0.5, ge=0, le=1)
    checkpoint_interval_s: float = Field(1800.0, gt=0)
    retry_delay_s: float = Field(60.0, ge=0)
    default_max_retries: int = Field(3, ge=0)


class SimConfig(BaseModel):
    """How the simulator runs.

    Attributes:
        mode: ``rounds`` (decisions every ``round_s``, time-sharing like Gavel), ``events``
            (decisions on arrivals, completions and policy wake-ups), or ``auto`` (the
            policy's own preference).
        round_s: round length in rounds mode.
        checkpoint_s / restore_s: cost of stopping a running job and of resuming one; a
            preempted or migrated job spends ``checkpoint_s + restore_s`` holding its new GPUs
            before it makes progress again.
        locality_wait_s: how long a multi-GPU gang waits for one node before it may be split.
        compat: ``gavel`` reproduces Gavel's simulator (``docs/gavel-compat.md``): no cost Gavel
            does not model (preemption, restore, failures, placement), 360 s rounds timed and
            advanced as Gavel does (``int(rate·360)`` steps, a round ends at its latest finish,
            arrivals join at boundaries), and ``fifo``, ``max_min_fairness`` and
            ``finish_time_fairness`` (and their ``-agnostic`` twins) replaced by Gavel's own
            mechanism and policy math.
        compat_solver: the optimiser of Gavel's policies under ``compat``: ``ecos`` (Gavel's
            own, needs the ``gavel-compat`` extra), ``highs-ipm`` (interior point, no
            crossover), ``highs`` (simplex vertex), or ``auto`` (``ecos`` when installed).
        seed: the only source of randomness.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["auto", "rounds", "events"] = "auto"
    round_s: float = Field(360.0, gt=0)
    checkpoint_s: float = Field(30.0, ge=0)
    restore_s: float = Field(30.0, ge=0)
    locality_wait_s: float = Field(0.0, ge=0)
    failures: FailureConfig = FailureConfig()
    compat: Literal["gavel"] | None = None
    compat_solver: Literal["auto", "ecos", "highs", "highs-ipm"] = "auto"
    seed: int = 0
    max_sim_time_s: float | None = Field(None, gt=0)
    sample_every_s: float = Field(600.0, gt=0)

    def effective(self) -> SimConfig:
        """Apply ``compat``: returns the settings actually used."""
        if self.compat == "gavel":
            return self.model_copy(
                update={
                    "mode": "rounds",
                    "round_s": 360.0,
                    "checkpoint_s": 0.0,
                    "restore_s": 0.0,
                    "failures": FailureConfig(),
                }
            )
        return self
