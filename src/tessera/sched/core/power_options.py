"""The power budget a round must keep (:mod:`tessera.sched.core.power_budget` applies it).

Apart from the stage so that :class:`~tessera.sched.core.options.PlacementOptions` can carry
it without importing the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tessera.errors import SpecError
from tessera.perf.power import PowerModel


@dataclass(frozen=True, slots=True)
class PowerBudget:
    """A cluster power budget for the decision core.

    Attributes:
        budget_w: the most the cluster (busy and idle GPUs) may draw, in watts.
        model: the power model every draw and slowdown is read from.
        mode: ``flow`` (per-job limits where they cost least, then waiting) or ``uniform``
            (one limit for every GPU, the baseline).
    """

    budget_w: float
    model: PowerModel = field(compare=False)
    mode: Literal["flow", "uniform"] = "flow"

    def __post_init__(self) -> None:
        if not self.budget_w > 0:
            raise SpecError(f"power budget must be > 0 W, got {self.budget_w}")
        if self.mode not in ("flow", "uniform"):
            raise SpecError(f"power budget mode must be flow or uniform, got {self.mode!r}")
