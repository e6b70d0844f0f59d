"""Wall milliseconds per phase of a scheduling round (diagnostics only).

``decide`` times its phases (admit, order, place, preempt, explain, power) and reports them as
``Decision.phase_ms``; no decision ever reads them, so a round stays a pure function of its
snapshot.
"""

from __future__ import annotations

import time

__all__ = ["Laps"]


class Laps:
    """Wall milliseconds per phase of one round (diagnostics only; never read by decisions).

    Call it with a phase's name when the phase ends: the time since the previous call (or
    construction) is added to that phase."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t = time.perf_counter()

    def __call__(self, name: str) -> None:
        tick = time.perf_counter()
        self.ms[name] = self.ms.get(name, 0.0) + (tick - self._t) * 1e3
        self._t = tick
