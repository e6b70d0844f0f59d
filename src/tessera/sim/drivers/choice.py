"""Which driver a run's settings call for.

Kept apart from :mod:`tessera.sim.drivers.base` (the interface every driver imports), so the
drivers and the interface form no import circle: this module imports the drivers, none of
them imports it.
"""

from __future__ import annotations

from tessera.errors import SpecError
from tessera.sched.catalog import gavel_loop_only
from tessera.sched.core.policy import Policy
from tessera.sim.config import SimConfig
from tessera.sim.drivers.base import Driver
from tessera.sim.drivers.gavel import GavelDriver
from tessera.sim.drivers.heap import EventDriver, RoundDriver


def driver_for(config: SimConfig, policy: Policy) -> Driver:
    """The driver a run's effective settings call for."""
    if config.compat == "gavel":
        return GavelDriver()
    rounds = config.scheduler.uses_rounds(policy)
    refusal = gavel_loop_only(policy, shares_gpus=True, in_rounds=rounds)
    if refusal is not None:
        raise SpecError(refusal)
    if rounds:
        return RoundDriver()
    return EventDriver()
