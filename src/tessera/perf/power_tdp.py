"""An *estimated* power model from a flavor's TDP alone (no profile needed).

:class:`TdpPowerModel` implements :class:`~tessera.perf.power.PowerModel` for any flavor of the
catalog from :attr:`~tessera.model.gpus.GpuFlavor.tdp_w` and four documented constants. It is
what the power-budget stage and its benchmarks run on until a profile-backed model (Zeus's
measurements, ``default_power_model()``) is wired in; every estimate says
``measured=False, source="estimated:tdp-dvfs"``.

The model (all fractions of the flavor's TDP ``T``):

* a training job draws ``P0 = 0.85·T`` at the maximum limit (training rarely sits at the cap);
  an idle GPU draws ``0.15·T``;
* the accepted limits run from ``0.5·T`` to ``T`` in ``0.05·T`` steps (``nvidia-smi`` ranges
  are roughly this wide on datacentre boards);
* below ``P0`` the clocks drop. Board power is a static part ``Ps = 0.3·T`` plus a dynamic part
  that scales with the cube of the clock (voltage follows frequency), so a limit ``L < P0``
  runs at the relative clock ``f = ((L − Ps)/(P0 − Ps))^(1/3)`` and draws ``L``;
* a step is 60 % compute (scales as ``1/f``) and 40 % memory and communication (does not), so
  the step-time factor is ``0.4 + 0.6/f``. At ``L = 0.6·T`` a step takes ≈ 1.23× as long for
  ≈ 29 % less power, in the range Zeus measured on V100 and A40.

The job's type and batch do not enter: the model knows the board, not the workload.
"""

from __future__ import annotations

from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerEstimate, PowerLimitRange

TRAIN_DRAW = 0.85
"""Average draw of a training job at the maximum limit, as a fraction of TDP."""
IDLE_DRAW = 0.15
"""Draw of an idle GPU, as a fraction of TDP."""
STATIC_DRAW = 0.30
"""The clock-independent part of board power, as a fraction of TDP."""
COMPUTE_SHARE = 0.6
"""The part of a step whose time scales with the clock."""
MIN_LIMIT = 0.5
"""The lowest accepted limit, as a fraction of TDP."""
LIMIT_STEP = 0.05
"""The step between accepted limits, as a fraction of TDP."""

SOURCE = "estimated:tdp-dvfs"


class TdpPowerModel:
    """The estimated TDP model (see the module docstring); stateless and cheap."""

    def limit_range(self, flavor: GpuFlavor) -> PowerLimitRange:
        """``0.5·T`` to ``T`` in ``0.05·T`` steps."""
        t = flavor.tdp_w
        return PowerLimitRange(min_w=MIN_LIMIT * t, max_w=t, step_w=LIMIT_STEP * t)

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
            SpecError: the limit is outside the flavor's range.
        """
        t = flavor.tdp_w
        p0 = TRAIN_DRAW * t
        if power_limit_w is None:
            return PowerEstimate(p0, 1.0, measured=False, source=SOURCE)
        self.limit_range(flavor).check(flavor, power_limit_w)
        if power_limit_w >= p0:
            return PowerEstimate(p0, 1.0, measured=False, source=SOURCE)
        ps = STATIC_DRAW * t
        f = ((power_limit_w - ps) / (p0 - ps)) ** (1.0 / 3.0)
        factor = (1.0 - COMPUTE_SHARE) + COMPUTE_SHARE / f
        return PowerEstimate(power_limit_w, factor, measured=False, source=SOURCE)

    def idle_power_w(self, flavor: GpuFlavor) -> float:
        """``0.15·T``."""
        return IDLE_DRAW * flavor.tdp_w
