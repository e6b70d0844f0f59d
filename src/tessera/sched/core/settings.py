"""How the scheduler behaves: one settings object for the simulator and the live service.

"The policy you simulate is the policy you run" needs more than one ``decide()``: the cadence of
the rounds, how long a gang waits for locality, what a preemption costs, whether gangs may mix
flavors -- all of it changes which jobs run. :class:`SchedulerSettings` holds exactly these
knobs. The simulator (``SimConfig.scheduler``), the live service (``ServiceOptions.scheduler``)
and ``tessera explain`` read the same object, and the ``simulate`` and ``serve`` commands build
their flags from its fields (one default, one help text; :mod:`tessera.cli.settings_flags`).

Everything a driver alone decides (the seed, failure injection, the live poll period) lives in
the driver's own settings, next to a ``scheduler`` field of this type.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tessera.sched.core.options import PlacementOptions
from tessera.sched.core.policy import Policy

Cadence = Literal["auto", "rounds", "events"]


class SchedulerSettings(BaseModel):
    """The scheduler's behaviour, shared by every driver (simulated or wall clock)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Cadence = Field(
        "auto", description="rounds | events | auto (the policy's choice). rounds: decide every "
        "--round-s seconds, Gavel's time sharing; events: decide on arrivals, completions and "
        "policy wake-ups.")
    round_s: float = Field(360.0, gt=0, description="Round length in rounds mode (s).")
    fill_between_rounds: bool = Field(
        False, description="In rounds mode, let waiting jobs take idle GPUs between rounds "
        "(nobody is moved).")
    checkpoint_s: float = Field(30.0, ge=0, description="Checkpoint time on preemption (s).")
    restore_s: float = Field(30.0, ge=0, description="Restore time on resume or migration (s).")
    locality_wait_s: float = Field(
        0.0, ge=0, description="Wait this long for one node before splitting a gang across "
        "nodes (s).")
    upgrade_min_gain: float = Field(
        0.2, ge=0, description="Move a running gang to a faster free flavor when it then "
        "finishes at least this fraction sooner, migration cost included (preemptive "
        "event-driven policies).")
    max_preemption_attempts: int = Field(
        64, ge=0, description="Waiting jobs (highest ranked first) that may try to make room "
        "by preemption in one event round.")
    mixed_gangs: bool = Field(
        False, description="Let a job that no single flavor can hold start on GPUs of several "
        "flavors, at the planner's predicted speed.")
    mixed_min_speed: float = Field(
        0.5, gt=0, le=1, description="With --mixed-gangs: the least speed of a mix, as a "
        "fraction of the job's speed on its best flavor.")

    @property
    def migration_cost_s(self) -> float:
        """What stopping a gang and resuming it elsewhere costs: checkpoint plus restore."""
        return self.checkpoint_s + self.restore_s

    def uses_rounds(self, policy: Policy) -> bool:
        """Whether ``policy`` runs in rounds under these settings (``auto``: its own choice)."""
        return self.mode == "rounds" or (self.mode == "auto" and policy.round_based)

    def placement(self, largest_node_gpus: int | None = None) -> PlacementOptions:
        """The decision core's placement options for these settings."""
        return PlacementOptions(
            locality_wait_s=self.locality_wait_s,
            migration_cost_s=self.migration_cost_s,
            upgrade_min_gain=self.upgrade_min_gain,
            max_preemption_attempts=self.max_preemption_attempts,
            largest_node_gpus=largest_node_gpus,
            mixed_gangs=self.mixed_gangs,
            mixed_min_speed=self.mixed_min_speed,
        )
