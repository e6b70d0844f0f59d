"""Power options of a round: the power budget it must keep
(:mod:`tessera.sched.core.power_budget` applies it) and Zeus's cost per job
(:mod:`tessera.sched.core.energy_choice`).

Apart from the stage so that :class:`~tessera.sched.core.options.PlacementOptions` can carry
it without importing the stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec
from tessera.perf.power import PowerModel


@dataclass(frozen=True, slots=True)
class PowerBudget:
    """A cluster power budget for the decision core.

    Attributes:
        budget_w: the most the cluster (busy and idle GPUs) may draw, in watts.
        model: the power model every draw and slowdown is read from.
        mode: ``flow`` (per-job limits where they cost least, greedily, then waiting),
            ``exact`` (the same choice solved exactly: :mod:`~.power_exact`; the greedy
            past its time limit) or ``uniform`` (one limit for every GPU, the baseline).
        wait_for_fast: while the budget binds, a start on a far slower board waits for a
            fast board a running job frees soon (:mod:`~.power_displace`; not uniform).
    """

    budget_w: float
    model: PowerModel = field(compare=False)
    mode: Literal["flow", "exact", "uniform"] = "flow"
    wait_for_fast: bool = False

    def __post_init__(self) -> None:
        if not self.budget_w > 0:
            raise SpecError(f"power budget must be > 0 W, got {self.budget_w}")
        if self.mode not in ("flow", "exact", "uniform"):
            raise SpecError(f"power budget mode must be flow, exact or uniform, got "
                            f"{self.mode!r}")


@dataclass(frozen=True, slots=True)
class ZeusCost:
    """Zeus's cost of running a job on a flavor (see the module docstring).

    Attributes:
        eta: weight of energy against time, in [0, 1].
        model: the power model (draws and step-time factors per limit).
        max_power_w: MAXPOWER, watts per GPU (one number for the cluster).
    """

    eta: float
    model: PowerModel = field(compare=False)
    max_power_w: float
    _memo: dict[tuple[str, str | None, GpuFlavor], tuple[float, float, bool]] = field(
        default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.eta) and 0.0 <= self.eta <= 1.0):
            raise SpecError(f"eta must be in [0, 1], got {self.eta}")
        if not (math.isfinite(self.max_power_w) and self.max_power_w > 0):
            raise SpecError(f"MAXPOWER must be > 0 W, got {self.max_power_w}")

    def best(self, spec: JobSpec, flavor: GpuFlavor) -> tuple[float, float, bool]:
        """``(limit_w, cost per GPU-second at full speed, capped)``: the limit minimising
        ``step_time_factor · (η·draw + (1 − η)·MAXPOWER)`` and that minimum (joules per
        GPU-second of uncapped run time); ``capped`` is whether the limit is below the
        flavor's maximum."""
        key = (spec.job_type, spec.model, flavor)
        got = self._memo.get(key)
        if got is None:
            limits = self.model.limit_range(flavor).limits_w()
            best_w, best_c = limits[-1], math.inf
            for w in reversed(limits):  # ties keep the higher limit (faster, same cost)
                e = self.model.estimate(spec.job_type, spec.model, flavor, w)
                c = e.step_time_factor * (self.eta * e.avg_power_w
                                          + (1.0 - self.eta) * self.max_power_w)
                if c < best_c - 1e-12:
                    best_w, best_c = w, c
            got = self._memo[key] = (best_w, best_c, best_w < limits[-1])
        return got

    def per_step(self, spec: JobSpec, flavor: GpuFlavor, rate_steps_s: float) -> float:
        """Joules-equivalent one step of ``spec``'s gang costs on ``flavor`` at its best
        limit (``inf`` where it cannot run)."""
        if rate_steps_s <= 0:
            return math.inf
        return spec.num_gpus * self.best(spec, flavor)[1] / rate_steps_s
