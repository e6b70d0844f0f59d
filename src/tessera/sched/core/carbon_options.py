"""The carbon-shifting stage's inputs: the forecast per slot and the stage's settings.

:mod:`tessera.sched.core.carbon_stage` reads them; the simulator builds them from its carbon
trace (:mod:`tessera.sim.carbon_runs`). Both are typed, checked inputs, so the stage itself
reads no clock and no file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tessera.errors import SpecError
from tessera.workload.carbon import CarbonTrace

__all__ = ["SHIFT_MODES", "CarbonForecast", "CarbonShift"]

SHIFT_MODES: tuple[str, ...] = ("carbon-time", "wait-awhile", "ours")
"""The modes :class:`CarbonShift` knows."""


@dataclass(frozen=True, slots=True, eq=False)
class CarbonForecast:
    """Grid carbon intensity per slot, slot ``i`` covering ``[i·slot_s, (i+1)·slot_s)`` of
    simulated time; past its end it wraps around to the start (as the simulator's carbon
    accounting does).

    Raises:
        SpecError: no slots, a slot length <= 0, or an intensity negative or not finite.
    """

    intensity_g_per_kwh: np.ndarray
    slot_s: float = 1800.0

    def __post_init__(self) -> None:
        ci = np.asarray(self.intensity_g_per_kwh, dtype=float)
        if ci.ndim != 1 or len(ci) == 0:
            raise SpecError("carbon forecast: needs at least one slot")
        if not (math.isfinite(self.slot_s) and self.slot_s > 0):
            raise SpecError(f"carbon forecast: slot_s must be > 0, got {self.slot_s!r}")
        bad = ~np.isfinite(ci) | (ci < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise SpecError(f"carbon forecast: slot {i} intensity {float(ci[i]):g} gCO2/kWh is "
                            "negative or not finite")
        object.__setattr__(self, "intensity_g_per_kwh", ci)

    @classmethod
    def from_trace(cls, trace: CarbonTrace, slot_s: float = 1800.0) -> CarbonForecast:
        """Each slot's mean intensity over one period of ``trace`` (GAIA's oracle forecast)."""
        n = max(1, math.ceil(trace.period_s / slot_s - 1e-9))
        ci = np.diff(trace.integral(np.arange(n + 1) * slot_s)) / slot_s
        return cls(ci, slot_s)

    def slot_of(self, t_s: float) -> int:
        """The slot holding time ``t_s``."""
        return int(t_s // self.slot_s)

    def window(self, first: int, n: int) -> np.ndarray:
        """The intensities of slots ``first .. first + n − 1`` (wrapping around)."""
        ci = self.intensity_g_per_kwh
        return ci[np.arange(first, first + max(n, 0)) % len(ci)]


@dataclass(frozen=True, slots=True, eq=False)
class CarbonShift:
    """The stage's settings (see the module docstring).

    Attributes:
        mode: ``carbon-time``, ``wait-awhile`` or ``ours``.
        forecast: the carbon intensity per slot.
        price_g_per_gpu_h: ``ours``: grams of CO2 one GPU-hour of delay is worth (>= 0).
        gpu_power_w: ``ours``: a busy GPU's draw, to turn intensity into grams per GPU-slot.
        overhead_s: what one suspension costs (checkpoint + restore), kept free before a
            job's latest finish.
    """

    mode: str
    forecast: CarbonForecast
    price_g_per_gpu_h: float = 0.0
    gpu_power_w: float = 250.0
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in SHIFT_MODES:
            raise SpecError(f"carbon shift {self.mode!r}: one of {', '.join(SHIFT_MODES)}")
        for name in ("price_g_per_gpu_h", "gpu_power_w", "overhead_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise SpecError(f"carbon shift: {name} must be >= 0, got {v!r}")
