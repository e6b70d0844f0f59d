"""An *estimated* power model for any flavor: Zeus's A40 transformer curve scaled to its TDP.

Zeus measured how a transformer's epoch time and board power change with the power limit on
an A40 (``squad/bert_base_uncased``, batch 32, limits 100-300 W). Expressed against the
maximum limit -- limit fraction r = limit / TDP, time factor τ(r) = time(r) / time(1), power
fraction π(r) = power(r) / TDP -- the curve says what capping costs a compute-bound
transformer: at r = 0.83 the step is 2.8 % slower and draws 13 % less. This model assumes the
same *shape* for every flavor, scaled to the flavor's TDP, for fractions from 1/3 to 1, and
interpolates linearly between Zeus's points. That is an assumption (newer GPUs, other models
and frequency locking instead of power capping bend the curve differently), so every answer is
marked ``measured=False`` with ``source="estimated:zeus-a40-bert-scaled"``.

Idle power is not in Zeus's data; the model uses ``IDLE_FRACTION`` × TDP (documented
assumption: a data-centre GPU held in a job's context idles near a fifth of its TDP).
"""

from __future__ import annotations

import functools
import itertools
import math

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerEstimate, PowerLimitRange
from tessera.perf.zeus_table import ZeusTable, workload

#: Board power of a GPU waiting inside a job (pipeline bubbles), as a fraction of its TDP.
IDLE_FRACTION = 0.2
SOURCE = "estimated:zeus-a40-bert-scaled"


@functools.cache
def _curve() -> tuple[tuple[float, float, float], ...]:
    """(limit fraction, time factor, power fraction) of the A40 BERT rows, ascending."""
    t = ZeusTable.load("a40")
    w = workload("squad")
    rows = [t.power_row(w, 32, p) for p in t.power_limits(w, 32)]
    top = rows[-1]
    return tuple((r.power_limit_w / top.power_limit_w, r.time_per_epoch_s / top.time_per_epoch_s,
                  r.avg_power_w / top.power_limit_w) for r in rows)


def curve_at(fraction: float) -> tuple[float, float]:
    """(time factor, power fraction) at a limit fraction in [min, 1], interpolated."""
    pts = _curve()
    if not pts[0][0] - 1e-9 <= fraction <= 1.0 + 1e-9:
        raise SpecError(f"limit fraction {fraction:.3f} outside {pts[0][0]:.3f}-1")
    for (r0, t0, p0), (r1, t1, p1) in itertools.pairwise(pts):
        if fraction <= r1 + 1e-12:
            f = (fraction - r0) / (r1 - r0)
            return t0 + f * (t1 - t0), p0 + f * (p1 - p0)
    return pts[-1][1], pts[-1][2]


class ScaledZeusPowerModel:
    """:class:`~tessera.perf.power.PowerModel` for any flavor, from Zeus's A40 BERT curve.

    ``job_type``, ``model`` and ``batch_size`` are accepted and not used: every job is assumed
    to be a compute-bound transformer (the planner's pipeline stages are).
    """

    step_w: float = 25.0

    def limit_range(self, flavor: GpuFlavor) -> PowerLimitRange:
        """From ``min fraction × TDP`` (Zeus's 100/300, rounded up to the 25 W grid) to TDP."""
        low = math.ceil(_curve()[0][0] * flavor.tdp_w / self.step_w) * self.step_w
        return PowerLimitRange(min(low, flavor.tdp_w), flavor.tdp_w, self.step_w)

    def estimate(self, job_type: str, model: str | None, flavor: GpuFlavor,
                 power_limit_w: float | None = None,
                 batch_size: int | None = None) -> PowerEstimate:
        """Scaled power and step-time factor at ``power_limit_w`` (``None``: TDP)."""
        limit = flavor.tdp_w if power_limit_w is None else power_limit_w
        self.limit_range(flavor).check(flavor, limit)
        time_factor, power_fraction = curve_at(limit / flavor.tdp_w)
        return PowerEstimate(power_fraction * flavor.tdp_w, time_factor, False, SOURCE)

    def idle_power_w(self, flavor: GpuFlavor) -> float:
        """``IDLE_FRACTION`` × TDP (an assumption; see the module docstring)."""
        return IDLE_FRACTION * flavor.tdp_w
