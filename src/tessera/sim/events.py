"""The few names a simulated world and its drivers share about future events.

A driver owns the clock and the event heap; the world asks it for a future completion,
failure or retry through an :data:`EventSink`. (Kept apart from :mod:`tessera.sim.world` so
the world stays one concept; :mod:`tessera.sim.world` re-exports them.)
"""

from __future__ import annotations

from collections.abc import Callable

EPS_S = 1e-9
"""Events closer than this are simultaneous."""

ProgressFn = Callable[[int, int], None]
"""``progress(jobs_done, jobs_total)``: called as a run advances."""

EventSink = Callable[[float, int, int, int], None]
"""``schedule(time_s, kind, job_index, epoch)``: how the world asks its driver for a future
completion, failure or retry (:data:`COMPLETE`, :data:`FAIL`, :data:`RETRY`)."""

COMPLETE, FAIL, RETRY = 0, 1, 2


def no_events(t_s: float, kind: int, job: int, epoch: int) -> None:
    """The sink of a world whose driver schedules no future events (Gavel's loop)."""
    raise RuntimeError("this driver schedules no future events")
