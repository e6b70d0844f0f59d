"""The estimated GPU power model: every catalog flavor, from its board power (TDP) alone.

Where nobody measured a job on a flavor (Zeus measured six workloads on four GPUs; the catalog
has fifteen flavors and traces name hundreds of models), energy still has to be counted. This
module is the documented fall-back every energy-aware part reads through
:func:`default_power_model`, and it says so: each :class:`~tessera.perf.power.PowerEstimate`
it returns has ``measured=False`` and ``source="estimated:tdp-fit"``.

The model, for a flavor of board power ``TDP`` at power limit ``L`` (watts):

* **Limits** ``L`` run from ``MIN_LIMIT_FRACTION × TDP`` (rounded to 5 W) to ``TDP`` in 25 W
  steps. NVIDIA lets most data-centre boards go down to a third or a half of TDP; Zeus's
  tables start at 33 % (V100 PCIe, A40, RTX 6000) and 50 % (P100).
* **Draw at the maximum limit** ``P_max = ALPHA × TDP``: a training job rarely pins the board
  at its limit.
* **Draw under a cap** ``P(L) = min(P_max, BETA × L)``: once the limit is below what the job
  would draw, the board runs just under the limit.
* **Step time** grows as the draw falls: ``factor(L) = (P(L) / P_max) ** -GAMMA``. With
  ``GAMMA < 1`` a cap costs less time than it saves power, which is Zeus's finding.
* **Idle** ``IDLE_FRACTION × TDP`` for a GPU that holds no job.

``ALPHA``, ``BETA`` and ``GAMMA`` are *fitted to Zeus's measured table* (bundled at
``tessera/data/zeus``) by :func:`fit_constants`: ALPHA is the median over Zeus's configurations
(workload, batch, optimizer, GPU) of their draw at the maximum limit over that limit; BETA the
median of draw over limit in the rows where the limit binds (limit below the uncapped draw);
GAMMA the least-squares slope, through the origin, of ``log factor`` on ``log P(L)/P_max``.
:func:`fit_errors` says how far the model is from each measured row (``docs/energy.md`` quotes
it). ``IDLE_FRACTION`` is not fitted (Zeus measured no idle boards): idle data-centre GPUs
read 15-25 % of their TDP in ``nvidia-smi``; we take 20 %.

The model ignores the job (its ``job_type``, ``model`` and batch): without a measurement, every
job draws the median. That is the price of an estimate, and why ``measured`` says so.
:func:`default_power_model` puts Zeus's measured model in front of it, so the estimate answers
only where Zeus measured nothing.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TypeVar

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerEstimate, PowerLimitRange, PowerModel
from tessera.perf.zeus_table import ZeusPowerModel

__all__ = [
    "ALPHA",
    "BETA",
    "ESTIMATED_SOURCE",
    "GAMMA",
    "IDLE_FRACTION",
    "MIN_LIMIT_FRACTION",
    "EstimatedPowerModel",
    "FitErrors",
    "PowerChain",
    "PowerUnknown",
    "ZeusRow",
    "default_power_model",
    "fit_constants",
    "fit_errors",
    "zeus_rows",
]

_T = TypeVar("_T")

ALPHA = 0.655
"""Median draw at the maximum limit, as a fraction of it (fitted: :func:`fit_constants`)."""
BETA = 0.940
"""Draw over limit where the limit binds (fitted)."""
GAMMA = 0.747
"""Step-time exponent: ``factor = (P / P_max) ** -GAMMA`` (fitted)."""
IDLE_FRACTION = 0.20
"""Idle board power over TDP (not fitted; see the module docstring)."""
MIN_LIMIT_FRACTION = 0.40
"""Lowest power limit over TDP (within NVIDIA's usual 33-50 %)."""
LIMIT_STEP_W = 25.0
"""Step between the power limits an optimiser tries, in watts (Zeus's tables use 25 W)."""
ESTIMATED_SOURCE = "estimated:tdp-fit"
"""``PowerEstimate.source`` of every estimate of this model."""


class PowerUnknown(LookupError):
    """A power model has no numbers for a setting (a measured model outside its table)."""


@dataclass(frozen=True, slots=True)
class EstimatedPowerModel:
    """The TDP-based model of the module docstring; covers every catalog flavor."""

    alpha: float = ALPHA
    beta: float = BETA
    gamma: float = GAMMA
    idle_fraction: float = IDLE_FRACTION

    def limit_range(self, flavor: GpuFlavor) -> PowerLimitRange:
        """``MIN_LIMIT_FRACTION × TDP`` (to 5 W) up to TDP, in 25 W steps."""
        low = 5.0 * round(MIN_LIMIT_FRACTION * flavor.tdp_w / 5.0)
        return PowerLimitRange(min_w=low, max_w=flavor.tdp_w, step_w=LIMIT_STEP_W)

    def max_draw_w(self, flavor: GpuFlavor) -> float:
        """Average draw of a training job at the maximum limit, in watts."""
        return self.alpha * flavor.tdp_w

    def estimate(
        self,
        job_type: str,
        model: str | None,
        flavor: GpuFlavor,
        power_limit_w: float | None = None,
        batch_size: int | None = None,
    ) -> PowerEstimate:
        """Draw and step-time factor at ``power_limit_w`` (``None``: the maximum).

        Raises:
            SpecError: the limit is outside the flavor's range (the message names it).
        """
        p_max = self.max_draw_w(flavor)
        if power_limit_w is None:
            return PowerEstimate(p_max, 1.0, False, ESTIMATED_SOURCE)
        self.limit_range(flavor).check(flavor, power_limit_w)
        p = min(p_max, self.beta * power_limit_w)
        return PowerEstimate(p, (p / p_max) ** -self.gamma, False, ESTIMATED_SOURCE)

    def idle_power_w(self, flavor: GpuFlavor) -> float:
        """``IDLE_FRACTION × TDP``."""
        return self.idle_fraction * flavor.tdp_w


@dataclass(frozen=True, slots=True)
class PowerChain:
    """Power models asked in order: the first that knows a setting answers.

    A model that has no numbers for a setting raises :class:`PowerUnknown` and the next one
    is asked; the last one must know every flavor (the estimated model does). Limit ranges and
    idle power come from the first model that gives them, the same way.
    """

    models: tuple[PowerModel, ...]

    def __post_init__(self) -> None:
        if not self.models:
            raise SpecError("power chain: needs at least one model")

    def limit_range(self, flavor: GpuFlavor) -> PowerLimitRange:
        return self._first(lambda m: m.limit_range(flavor))

    def estimate(
        self,
        job_type: str,
        model: str | None,
        flavor: GpuFlavor,
        power_limit_w: float | None = None,
        batch_size: int | None = None,
    ) -> PowerEstimate:
        return self._first(lambda m: m.estimate(job_type, model, flavor, power_limit_w,
                                                 batch_size))

    def idle_power_w(self, flavor: GpuFlavor) -> float:
        return self._first(lambda m: m.idle_power_w(flavor))

    def _first(self, ask: Callable[[PowerModel], _T]) -> _T:
        for m in self.models[:-1]:
            try:
                return ask(m)
            except PowerUnknown:
                continue
        return ask(self.models[-1])


@functools.cache
def default_power_model() -> PowerModel:
    """The one power model every part reads: measured where Zeus measured, estimated elsewhere.

    It is :class:`~tessera.perf.zeus_table.ZeusPowerModel` with this module's
    :class:`EstimatedPowerModel` as its fallback: a job whose workload Zeus measured, on a
    flavor Zeus measured (V100, P100, RTX 6000), reads Zeus's rows (``measured=True``,
    ``source="zeus:<gpu>"``); every other job and flavor, and every idle GPU, reads the
    estimate (``measured=False``, ``source="estimated:tdp-fit"``). On a measured flavor the
    limit range is the part of Zeus's measured range the estimate also accepts, so a limit an
    optimiser picks from :meth:`limit_range` is valid whichever of the two answers. The model
    is built once (it is immutable) and nothing registers itself at import.
    """
    return ZeusPowerModel(fallback=EstimatedPowerModel())


# -- the fit to Zeus's table -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ZeusRow:
    """One row of Zeus's ``summary_power_<gpu>.csv``: a configuration at one power limit."""

    gpu: str
    config: tuple[str, str, int, str]
    """``(dataset, network, batch_size, optimizer)``."""
    limit_w: float
    epoch_s: float
    avg_power_w: float


ZEUS_GPUS: tuple[str, ...] = ("v100", "a40", "p100", "rtx6000")
"""The GPUs of Zeus's bundled table (their max limit in the table is their TDP there)."""


@functools.cache
def zeus_rows() -> tuple[ZeusRow, ...]:
    """Every row of the bundled Zeus power tables (``tessera/data/zeus``)."""
    out: list[ZeusRow] = []
    folder = resources.files("tessera.data").joinpath("zeus")
    for gpu in ZEUS_GPUS:
        text = folder.joinpath(f"summary_power_{gpu}.csv").read_text(encoding="utf-8")
        for r in csv.DictReader(text.splitlines()):
            out.append(ZeusRow(
                gpu, (r["dataset"], r["network"], int(r["batch_size"]), r["optimizer"]),
                float(r["power_limit"]), float(r["time_per_epoch"]), float(r["average_power"]),
            ))
    return tuple(out)


def _with_top(rows: Sequence[ZeusRow]) -> Iterator[tuple[ZeusRow, float, ZeusRow]]:
    """Each row with its GPU's maximum limit and its configuration's row at that limit."""
    tdp: dict[str, float] = {}
    for r in rows:
        tdp[r.gpu] = max(tdp.get(r.gpu, 0.0), r.limit_w)
    top = {(r.gpu, r.config): r for r in rows if r.limit_w == tdp[r.gpu]}
    for r in rows:
        t = top.get((r.gpu, r.config))
        if t is not None:
            yield r, tdp[r.gpu], t


def fit_constants(rows: Sequence[ZeusRow]) -> tuple[float, float, float]:
    """``(ALPHA, BETA, GAMMA)`` fitted to ``rows`` (the module docstring says how)."""
    paired = list(_with_top(rows))
    alpha = _median([t.avg_power_w / tdp for r, tdp, t in paired if r is t])
    beta = _median([r.avg_power_w / r.limit_w for r, _, t in paired
                    if r.limit_w < t.avg_power_w])
    xy = [(math.log(r.avg_power_w / t.avg_power_w), math.log(r.epoch_s / t.epoch_s))
          for r, _, t in paired if r.avg_power_w < 0.99 * t.avg_power_w]
    gamma = -sum(x * y for x, y in xy) / sum(x * x for x, _ in xy)
    return alpha, beta, gamma


@dataclass(frozen=True, slots=True)
class FitErrors:
    """How far the estimated model is from Zeus's measured rows (relative errors)."""

    rows: int
    power_mape: float
    """Mean |estimated − measured| / measured of the average power, over every row."""
    time_factor_mape: float
    """The same for the step-time factor against the configuration's maximum-limit row."""
    power_mape_capped: float
    """Power error over the rows where the limit binds (the config would draw more)."""


def fit_errors(model: EstimatedPowerModel, rows: Sequence[ZeusRow]) -> FitErrors:
    """Compare ``model`` with each measured row, taking each GPU's TDP from the table."""
    p_err: list[float] = []
    f_err: list[float] = []
    cap_err: list[float] = []
    for r, tdp, t in _with_top(rows):
        p_max = model.alpha * tdp
        p = min(p_max, model.beta * r.limit_w)
        e = abs(p - r.avg_power_w) / r.avg_power_w
        p_err.append(e)
        if r.limit_w < t.avg_power_w:
            cap_err.append(e)
        f_true = r.epoch_s / t.epoch_s
        f_err.append(abs((p / p_max) ** -model.gamma - f_true) / f_true)
    return FitErrors(len(p_err), _mean(p_err), _mean(f_err), _mean(cap_err))


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise SpecError("power fit: no rows to fit")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan
