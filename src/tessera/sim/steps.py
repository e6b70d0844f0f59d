"""The arithmetic of advancing a job through event times, shared by
:meth:`tessera.sim.state.SimJob.advance_each` and :mod:`tessera.sim.catchup`.

Both must perform the same float operations in the same order as
:meth:`~tessera.sim.state.SimJob.advance` does one event at a time: the results depend on it,
bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence


def whole_gang_steps(
    dts: Sequence[float], g: int, n: int, rate: float, attained: float, run_s: float,
    busy: float, remaining: float,
) -> tuple[float, float, float, float]:
    """A whole gang's books on one flavor after the steps ``dts`` (``g`` GPUs counted for
    attained service, ``n`` held): ``(attained, run_s, busy, remaining)``, by the operations
    :meth:`SimJob.advance` performs, in its order, so the floats are the same bit for bit."""
    for dt in dts:
        attained += g * dt
        run_s = run_s + dt
        busy = busy + n * dt
        left = remaining - rate * dt
        remaining = 0.0 if left < 0.0 else left
    return attained, run_s, busy, remaining


def steps_from(times: Sequence[float], last: float) -> tuple[list[float], float]:
    """The differences ``t - last`` that advancing from ``last`` through ``times`` takes, in
    order (a time not past the previous one is skipped, as :meth:`SimJob.advance` skips it),
    and the time they end at."""
    dts: list[float] = []
    for t in times:
        dt = t - last
        if dt <= 0:
            continue
        dts.append(dt)
        last = t
    return dts, last


