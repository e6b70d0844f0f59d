"""Emulating a mixed-GPU job on a CPU-only machine, deterministically.

Without GPUs every rank computes on the same CPU cores, so real compute says nothing about
heterogeneity -- and on a small shared machine it is also noisy (ranks contend for cores). The
emulator therefore gives each rank a *nominal* step time from a simple device model and makes the
rank's step last at least that long:

    nominal_i(b) = (overhead_s + per_sample_s · b) / speed_i
    emulated compute time = max(measured compute, nominal_i(b))

``speed_i`` is the rank's relative speed (1.0 for the fastest flavor in the job, from the catalog
via :func:`tessera.train.devices.relative_speeds`, or given explicitly). After its real forward and
backward pass a rank sleeps for whatever is left of its nominal time, so a rank on a "T4" takes
longer than one on an "A100" for the same batch, exactly in the catalog's ratio. The real model
is kept tiny so its compute stays well below the nominal time and the ratios hold even when the
cores are shared. Gradients, all-reduces, checkpoints and the balancer are all real; only the
duration of compute is emulated.

A :class:`SpeedChange` multiplies a rank's speed from a given step on (``0.5`` halves it), to
show that the runtime notices and rebalances.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError


@dataclass(frozen=True, slots=True)
class EmulationConfig:
    """The device model for emulated ranks (times are for a rank of relative speed 1.0).

    Attributes:
        overhead_s: fixed time per step (α of the fastest device).
        per_sample_s: time per sample (β of the fastest device).
    """

    overhead_s: float = 0.0005
    per_sample_s: float = 0.002

    def __post_init__(self) -> None:
        if self.overhead_s < 0 or self.per_sample_s <= 0:
            raise SpecError("emulation needs overhead_s ≥ 0 and per_sample_s > 0")


@dataclass(frozen=True, slots=True)
class SpeedChange:
    """From ``step`` on, rank ``rank`` runs at ``factor`` times its previous speed."""

    step: int
    rank: int
    factor: float


def parse_speed_change(text: str) -> SpeedChange:
    """Parse ``STEP:RANK:FACTOR`` (e.g. ``20:0:0.5`` halves rank 0's speed from step 20).

    Raises:
        SpecError: not three fields, non-numeric fields, a negative step or rank, or a
            non-positive factor.
    """
    parts = text.split(":")
    if len(parts) != 3:
        raise SpecError(f"speed change {text!r}: expected STEP:RANK:FACTOR, e.g. 20:0:0.5")
    try:
        step, rank, factor = int(parts[0]), int(parts[1]), float(parts[2])
    except ValueError:
        raise SpecError(
            f"speed change {text!r}: STEP and RANK must be integers, FACTOR a number"
        ) from None
    if step < 0 or rank < 0 or not factor > 0:
        raise SpecError(f"speed change {text!r}: need STEP ≥ 0, RANK ≥ 0 and FACTOR > 0")
    return SpeedChange(step, rank, factor)


class Emulator:
    """Pads each rank's compute to its nominal duration on an emulated device."""

    def __init__(self, speeds: Sequence[float], config: EmulationConfig | None = None,
                 changes: Sequence[SpeedChange] = ()) -> None:
        if not speeds or min(speeds) <= 0:
            raise SpecError("emulated speeds must be positive")
        for c in changes:
            if c.rank >= len(speeds):
                raise SpecError(
                    f"speed change for rank {c.rank}, but the job has only {len(speeds)} ranks"
                )
        self.speeds = tuple(float(s) for s in speeds)
        self.config = config or EmulationConfig()
        self.changes = tuple(sorted(changes, key=lambda c: c.step))

    def speed(self, step: int, rank: int) -> float:
        """Relative speed of ``rank`` during ``step`` (base speed times earlier changes)."""
        s = self.speeds[rank]
        for c in self.changes:
            if c.rank == rank and c.step <= step:
                s *= c.factor
        return s

    def nominal_step_s(self, step: int, rank: int, batch: int) -> float:
        """How long ``rank``'s compute for ``batch`` samples takes on its emulated device."""
        cfg = self.config
        return (cfg.overhead_s + cfg.per_sample_s * batch) / self.speed(step, rank)

    def pad(self, step: int, rank: int, batch: int, started_s: float) -> float:
        """Sleep until the nominal time since ``started_s`` (a perf_counter value) has passed.

        Returns:
            The emulated compute time: ``max(measured, nominal)``.
        """
        deadline = started_s + self.nominal_step_s(step, rank, batch)
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return time.perf_counter() - started_s
