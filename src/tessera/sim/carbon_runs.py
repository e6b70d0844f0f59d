"""The carbon-shifting stage of a simulated run (issue 34, 3c), built from its settings.

``SimConfig.carbon_shift`` turns on :mod:`tessera.sched.core.carbon_stage` in front of the
run's policy: its forecast is the run's carbon trace per 30-minute slot (GAIA's oracle
forecast), a suspension costs the scheduler's ``checkpoint_s + restore_s`` (plus
``resume_s`` when servers sleep: :mod:`tessera.sim.server_sleep`), and ``ours``
prices a GPU-slot at the busy draw of the cluster's most common flavor from
:func:`tessera.perf.power_estimate.default_power_model` (the model the energy book uses).
"""

from __future__ import annotations

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.perf.power_estimate import default_power_model
from tessera.sched.core.carbon_stage import CarbonForecast, CarbonShift
from tessera.sim.config import SimConfig

__all__ = ["shift_for"]


def shift_for(config: SimConfig, cluster: ClusterSpec) -> CarbonShift | None:
    """The run's :class:`CarbonShift` (``None`` without ``config.carbon_shift``).

    Raises:
        SpecError: shifting without a carbon trace.
    """
    if config.carbon_shift is None:
        return None
    if config.carbon_trace is None:
        raise SpecError(f"--carbon-shift {config.carbon_shift} needs a carbon trace "
                        "(--carbon gb|fr|de|FILE)")
    by_flavor = cluster.gpus_by_flavor()
    flavor = max(by_flavor, key=lambda f: (by_flavor[f], f.name))
    power_w = default_power_model().estimate("", None, flavor).avg_power_w
    s = config.scheduler
    # A held job may restart on a server that went to sleep meanwhile: its resume is part
    # of the suspension's cost (every mode alike).
    resume_s = config.resume_s if config.suspend_after_s is not None else 0.0
    return CarbonShift(config.carbon_shift, CarbonForecast.from_trace(config.carbon_trace),
                       config.carbon_price_g_per_gpu_h, power_w,
                       s.checkpoint_s + s.restore_s + resume_s)
