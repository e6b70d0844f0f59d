"""The kernels prior: a job's speed on a flavor from what it computes (a roofline per job).

One peak number per flavor cannot tell a compute-bound job from a memory- or launch-bound one;
Habitat predicts from the job's own kernels. This module does the same from the counts of
:mod:`tessera.perf.job_work` (FLOPs ``F``, bytes ``B`` and kernels ``K`` per step). A job's time
per step on flavor ``f`` is

    t[j, f] = core[j, f] / (exp(s[j] + e[f])) + K[j] * tau

* ``core`` is the roofline: ``max(F / P_f, B / BW_f)`` (``bound="max"``) or their sum
  (``"sum"``, no overlap of compute and memory traffic), with ``P_f`` the flavor's FP32 or
  tensor-core peak (``peak``) and ``BW_f`` its memory bandwidth (:mod:`tessera.model.gpus`);
* ``K * tau`` is the launch overhead, ``tau`` seconds per kernel, the same on every GPU (it is
  host time);
* ``s[j]`` is the job's efficiency (log fraction of the roofline it reaches): **one
  observation calibrates it** (several: their mean in logs); with none, the median of the
  reference job types';
* ``e[f]`` is the flavor's efficiency relative to the others, fitted on the reference job types
  (mean zero over them); a flavor no reference measured gets 0, the typical flavor.

:class:`KernelModel` fits ``s`` and ``e`` on a reference table and predicts rows for many jobs
at once. Which roofline (``bound``, ``peak``, ``tau``) and how much of it to blend with the
matrix completion (:mod:`tessera.perf.estimate`) is chosen by cross-validation on the other
job types and flavors (:mod:`tessera.perf.kernel_eval`), never on the job or flavor predicted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from tessera.model.gpus import resolve_flavor
from tessera.perf.completion import BoolArray, FloatArray
from tessera.perf.job_work import JobWork

#: The rooflines cross-validation chooses from.
BOUNDS = ("max", "sum")
PEAKS = ("fp32", "tensor")
#: Per-kernel launch overheads tried, seconds (eager PyTorch: a few to tens of microseconds).
OVERHEADS_S = (0.0, 10e-6)
#: A job never runs faster than this share of its time minus the overhead (keeps logs finite
#: when the overhead alone would exceed an observed step time).
MIN_CORE_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Roofline:
    """One way of turning a job's counts into a time per step on a flavor.

    Attributes:
        bound: ``max`` (compute and memory traffic overlap) or ``sum`` (they do not).
        peak: ``fp32`` or ``tensor`` (the dense FP16 tensor-core peak where the flavor has
            one, FP32 otherwise).
        overhead_s: launch overhead per kernel, seconds.
    """

    bound: str
    peak: str
    overhead_s: float

    def __post_init__(self) -> None:
        if self.bound not in BOUNDS or self.peak not in PEAKS or not (
                math.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise ValueError(f"roofline {self}: bound one of {BOUNDS}, peak one of {PEAKS}, "
                             "overhead_s >= 0")

    def core_s(self, work: FloatArray, flavors: Sequence[str]) -> FloatArray:
        """``(jobs, flavors)`` roofline seconds per step, ``work`` being ``(jobs, 3)``."""
        specs = [resolve_flavor(f) for f in flavors]
        peak = np.array([(g.fp16_tensor_tflops or g.fp32_tflops) if self.peak == "tensor"
                         else g.fp32_tflops for g in specs]) * 1e12
        bw = np.array([g.mem_bw_gbps for g in specs]) * 1e9
        compute = work[:, 0:1] / peak[None, :]
        memory = work[:, 1:2] / bw[None, :]
        core: FloatArray = (np.maximum(compute, memory) if self.bound == "max"
                            else compute + memory)
        return core

    def overhead(self, work: FloatArray) -> FloatArray:
        """``(jobs, 1)`` launch overhead seconds per step."""
        over: FloatArray = work[:, 2:3] * self.overhead_s
        return over


def all_rooflines() -> list[Roofline]:
    """Every roofline cross-validation chooses from."""
    return [Roofline(b, p, o) for b, p, o in product(BOUNDS, PEAKS, OVERHEADS_S)]


def work_matrix(work: Sequence[JobWork]) -> FloatArray:
    """``(jobs, 3)``: FLOPs, bytes, kernels per step."""
    return np.array([[w.flops, w.bytes, w.kernels] for w in work], dtype=np.float64)


class KernelModel:
    """A roofline with job and flavor efficiencies fitted on a reference table.

    Args:
        roofline: the roofline.
        flavors: the columns (short names); columns with no reference value get ``e = 0``.
        work: ``(refs, 3)`` counts of the reference job types.
        log_rates: ``(refs, flavors)`` their log steps per second, NaN where unmeasured.
    """

    def __init__(self, roofline: Roofline, flavors: Sequence[str], work: FloatArray,
                 log_rates: FloatArray) -> None:
        self.roofline = roofline
        self.flavors = tuple(flavors)
        eff = self._log_efficiency(work, log_rates)  # (refs, flavors), NaN where unmeasured
        known = ~np.isnan(eff)
        flavor_eff = np.zeros(len(self.flavors))
        job_eff = np.zeros(eff.shape[0])
        for _ in range(10):  # alternate means: s[j] given e, then e[f] given s
            job_eff = _nanmean_rows(eff - flavor_eff[None, :])
            cols = np.where(known, eff - job_eff[:, None], np.nan)
            measured = known.any(axis=0)
            flavor_eff = np.where(measured, _nanmean_rows(cols.T), 0.0)
            flavor_eff[measured] -= flavor_eff[measured].mean()
        self.flavor_eff = flavor_eff
        self.prior_job_eff = float(np.median(job_eff)) if job_eff.size else 0.0

    def _log_efficiency(self, work: FloatArray, log_rates: FloatArray) -> FloatArray:
        """``log(core / (t - overhead))`` per cell: how much of the roofline the job reached."""
        t = np.exp(-log_rates)
        over = self.roofline.overhead(work)
        busy = np.maximum(t - over, MIN_CORE_SHARE * t)
        eff: FloatArray = np.log(self.roofline.core_s(work, self.flavors) / busy)
        return eff

    def predict_log(self, work: FloatArray, log_obs: FloatArray, observed: BoolArray
                    ) -> FloatArray:
        """``(jobs, flavors)`` log rates for jobs with ``work`` and observations.

        ``log_obs`` (any value where ``observed`` is false) calibrates each job's efficiency;
        a job with no observation gets the references' median efficiency.
        """
        core = self.roofline.core_s(work, self.flavors)
        over = self.roofline.overhead(work)
        eff = self._log_efficiency(work, np.where(observed, log_obs, 0.0))
        rel = np.where(observed, eff - self.flavor_eff[None, :], 0.0)
        count = observed.sum(axis=1)
        job_eff = np.where(count > 0, rel.sum(axis=1) / np.maximum(count, 1),
                           self.prior_job_eff)
        t = core / np.exp(job_eff[:, None] + self.flavor_eff[None, :]) + over
        pred: FloatArray = -np.log(t)
        return pred


def _nanmean_rows(values: FloatArray) -> FloatArray:
    """Mean of each row over its finite cells (0 for a row with none)."""
    ok = ~np.isnan(values)
    total = np.where(ok, values, 0.0).sum(axis=1)
    mean: FloatArray = total / np.maximum(ok.sum(axis=1), 1)
    return mean
