"""GPU power: what a job draws on a flavor at a power limit, and how fast it runs there.

A GPU's power limit caps the board power; below its maximum the clocks drop and a step takes
longer, but usually by less than the power saved, which is where Zeus (NSDI'23) finds its
15-76 % energy savings. Everything energy-related in Tessera -- energy in simulation results,
cluster power budgets, Zeus's per-job optimiser, carbon-aware shifting -- reads one
:class:`PowerModel`, so all of them agree on a job's power.

A :class:`PowerEstimate` says for one (job, flavor, power limit, batch) setting the average
board power and the step-time factor against the same job at the flavor's maximum limit, and
whether the numbers were *measured* (a profile such as Zeus's) or *estimated* (a documented
model). Nothing is silently guessed: an estimate says so in ``measured`` and names its
``source``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor


@dataclass(frozen=True, slots=True)
class PowerEstimate:
    """One setting's power draw and speed.

    Attributes:
        avg_power_w: average board power per GPU while the job trains, in watts.
        step_time_factor: step time at this limit over step time at the flavor's maximum
            limit (>= 1.0 below the maximum; 1.0 at it).
        measured: ``True`` when read from a measured profile, ``False`` for a model estimate.
        source: where the numbers come from (``zeus:v100``, ``estimated:tdp-cubic``).
    """

    avg_power_w: float
    step_time_factor: float
    measured: bool
    source: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.avg_power_w) and self.avg_power_w >= 0):
            raise SpecError(f"power estimate: avg_power_w must be >= 0, got {self.avg_power_w}")
        if not (math.isfinite(self.step_time_factor) and self.step_time_factor > 0):
            raise SpecError(
                f"power estimate: step_time_factor must be > 0, got {self.step_time_factor}"
            )


@dataclass(frozen=True, slots=True)
class PowerLimitRange:
    """The power limits a flavor accepts (``nvidia-smi -q -d POWER``), in watts."""

    min_w: float
    max_w: float
    step_w: float = 25.0

    def check(self, flavor: GpuFlavor, limit_w: float) -> None:
        """Raise a clear :class:`SpecError` when ``limit_w`` is outside the range."""
        if not (math.isfinite(limit_w) and self.min_w <= limit_w <= self.max_w):
            raise SpecError(
                f"power limit {limit_w} W is outside {flavor.short}'s range "
                f"{self.min_w:g}-{self.max_w:g} W"
            )

    def limits_w(self) -> tuple[float, ...]:
        """The limits from ``min_w`` to ``max_w`` in ``step_w`` steps (both ends included)."""
        out: list[float] = []
        w = self.min_w
        while w < self.max_w - 1e-9:
            out.append(w)
            w += self.step_w
        out.append(self.max_w)
        return tuple(out)


class PowerModel(Protocol):
    """What every energy-aware part reads. Implementations live beside this module."""

    def limit_range(self, flavor: GpuFlavor) -> PowerLimitRange:
        """The power limits ``flavor`` accepts."""
        ...

    def estimate(
        self,
        job_type: str,
        model: str | None,
        flavor: GpuFlavor,
        power_limit_w: float | None = None,
        batch_size: int | None = None,
    ) -> PowerEstimate:
        """Power and speed of a job on ``flavor`` at ``power_limit_w`` (``None``: maximum)."""
        ...

    def idle_power_w(self, flavor: GpuFlavor) -> float:
        """Board power of an idle GPU of ``flavor``."""
        ...
