"""The driver interface (the choice of driver for a run's settings is in
:mod:`tessera.sim.drivers.choice`, which imports the drivers; this module imports none)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from tessera.sched.core.policy import Policy
from tessera.sim.config import SimConfig
from tessera.sim.world import SimWorld


class Driver(ABC):
    """Owns the simulated clock: when to decide, and how time credits progress."""

    name: str = ""
    split_large_gangs: bool = True
    """A gang larger than every node of a flavor runs at the split speed (Gavel's simulator
    runs every gang at its consolidated speed)."""

    def policy_for(self, policy: Policy, config: SimConfig) -> Policy:
        """The policy this driver runs in place of ``policy`` (itself, unless overridden)."""
        return policy

    @abstractmethod
    def uses_rounds(self) -> bool:
        """Whether the decision core is asked in rounds (snapshots then carry ``round_s``)."""

    @abstractmethod
    def run(self, world: SimWorld) -> None:
        """Advance ``world`` until every job is done, the horizon passes or nothing can move."""
