"""Simulation drivers: who owns the clock, and when the decision core is asked.

Three drivers share one :class:`~tessera.sim.world.SimWorld` and one ``decide()``:

* :class:`~tessera.sim.drivers.heap.EventDriver` -- decide on every arrival, completion,
  failure and policy wake-up (Kueue, Tiresias);
* :class:`~tessera.sim.drivers.heap.RoundDriver` -- decide every ``round_s`` seconds
  (Gavel's time-sharing rounds), optionally filling idle GPUs between rounds;
* :class:`~tessera.sim.drivers.gavel.GavelDriver` -- Gavel's own simulation loop, for
  ``--compat gavel`` (rounds end at their latest finish, progress in whole steps).

A driver implements :class:`Driver`: it may swap the policy (the Gavel driver runs Gavel's
twin of a policy), chooses the oracle's options, and runs the world to the end. None reaches
into another's internals, and the decision core never learns which one called it.
"""

from __future__ import annotations

from tessera.sim.drivers.base import Driver
from tessera.sim.drivers.choice import driver_for

__all__ = ["Driver", "driver_for"]
