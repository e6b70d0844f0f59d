"""Step time of one training iteration: ``t(b) = α + β·b``, fitted from measured profiles.

A GPU running a training step on a local batch of b samples pays a **fixed cost α** (kernel
launches, the optimizer update, Python overhead, anything that does not grow with the batch) and
a **per-sample cost β**. Pollux and Sia model compute time exactly this way, and Tessera's
data-parallel planner balances it: a fast GPU (small β) should take more samples than a slow one.

This module fits α and β per (model, flavor) by least squares on the Sia/Pollux profiles
(:mod:`tessera.perf.sia`):

* it uses the **single-GPU rows** (placement ``"1"``), whose ``step_time − sync_time`` is pure
  compute; when fewer than three distinct batches were measured on one GPU it falls back to all
  placements' ``step_time − sync_time`` (the compute part does not depend on the placement);
* it reports the fit's quality — R², RMSE and the largest residual — so a poor fit is visible
  (YOLOv3 and NCF step times are nearly flat in the batch, so their R² is low although the
  residuals are small in seconds);
* the largest local batch a flavor can run is the largest one measured (see
  :mod:`tessera.perf.memory`).

:class:`CostModel` is the one object the planner and the simulator share: per-device step-time
fits, gradient sizes and the all-reduce model of :mod:`tessera.perf.comm`.

**Same silicon, more memory.** A100-80GB and V100-32GB run the same chip as the profiled
A100-40GB and V100-16GB, so their step time is taken from the twin's profile (and said so in
:attr:`StepTimeFit.source_flavor`); their batch cap stays the twin's measured maximum, which is
conservative. Any other unprofiled flavor raises :class:`~tessera.errors.NoProfileError`, or,
with ``estimate_unprofiled``, gets a roofline estimate marked :attr:`StepTimeFit.estimated`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tessera.errors import NoProfileError
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.perf.comm import RingPath, allreduce_time_s
from tessera.perf.profiles import default_throughputs
from tessera.perf.roofline import RESNET50_TRAIN_FLOPS, Roofline
from tessera.perf.sia import SiaProfile, load_sia_profile, sia_flavors, sia_models

#: Flavor -> profiled flavor built on the same GPU chip (only memory differs).
SAME_SILICON: dict[GpuFlavor, GpuFlavor] = {
    resolve_flavor(twin): resolve_flavor(source) for twin, source in (
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB"),
        ("Tesla-V100-SXM2-32GB", "Tesla-V100-SXM2-16GB"))
}

#: Parameters of the Sia/Pollux workloads (architecture of each, from the Pollux paper's
#: workload table), used for gradient sizes. Approximate where marked.
SIA_MODEL_PARAMS: dict[str, float] = {
    "imagenet": 25.6e6,     # ResNet-50
    "cifar10": 11.2e6,      # ResNet-18 (CIFAR variant)
    "bert": 110e6,          # BERT-base fine-tuning on SQuAD
    "yolov3": 61.9e6,       # YOLOv3 (Darknet-53 backbone)
    "deepspeech2": 38e6,    # DeepSpeech2 on CMU-ARCTIC; approximate
    "ncf": 0.4e6,           # NeuMF on MovieLens-1M; approximate (embeddings dominate)
}
GRAD_BYTES_PER_PARAM = 4.0  # the Pollux workloads train in fp32



@dataclass(frozen=True, slots=True)
class StepTimeFit:
    """A fitted ``t(b) = α + β·b`` for one (model, flavor), with its quality.

    Attributes:
        model: the workload.
        flavor: the flavor asked about.
        source_flavor: the flavor whose profile was fitted (differs for same-silicon twins).
        alpha_s: fixed time per step.
        beta_s_per_sample: time per sample.
        r2: coefficient of determination of the fit.
        rmse_s: root-mean-square residual.
        max_abs_residual_s: largest residual.
        n_points: rows fitted.
        min_bsz: smallest batch fitted.
        max_bsz: largest batch fitted.
        max_local_bsz: largest batch measured on this flavor (the memory cap).
        rows_used: which rows were fitted (``single-GPU`` or ``all placements``), or how an
            estimate was made.
        estimated: True when no measurement of this flavor (or its chip twin) exists and the
            fit is a roofline estimate (see :meth:`CostModel.fit`).
    """

    model: str
    flavor: GpuFlavor
    source_flavor: GpuFlavor
    alpha_s: float
    beta_s_per_sample: float
    r2: float
    rmse_s: float
    max_abs_residual_s: float
    n_points: int
    min_bsz: int
    max_bsz: int
    max_local_bsz: int
    rows_used: str
    estimated: bool = False

    def step_time_s(self, local_bsz: float) -> float:
        return self.alpha_s + self.beta_s_per_sample * local_bsz

    def throughput_samples_per_s(self, local_bsz: float) -> float:
        return local_bsz / self.step_time_s(local_bsz)


@dataclass(frozen=True, slots=True)
class DeviceCost:
    """What the data-parallel planner needs to know about one GPU.

    Attributes:
        flavor: the GPU flavor.
        alpha_s: fixed time per micro-step.
        beta_s_per_sample: time per sample.
        max_local_bsz: samples that fit in memory in one micro-step.
    """

    flavor: GpuFlavor
    alpha_s: float
    beta_s_per_sample: float
    max_local_bsz: int

    def step_time_s(self, local_bsz: float) -> float:
        """Compute time for ``local_bsz`` samples, using ``ceil(b / cap)`` micro-steps.

        Each micro-step pays α again (gradient accumulation), so
        ``t(b) = α·⌈b / cap⌉ + β·b`` for ``b > 0`` and 0 for an idle device.
        """
        if local_bsz <= 0:
            return 0.0
        k = math.ceil(local_bsz / self.max_local_bsz - 1e-12)
        return self.alpha_s * max(1, k) + self.beta_s_per_sample * local_bsz

    def best_rate_samples_per_s(self) -> float:
        """Standalone throughput at the largest batch that fits (the best for a linear t(b))."""
        return self.max_local_bsz / (self.alpha_s + self.beta_s_per_sample * self.max_local_bsz)


def fit_linear(bsz: Sequence[float], time_s: Sequence[float]) -> tuple[float, float, np.ndarray]:
    """Least-squares ``time = α + β·bsz`` with α ≥ 0 and β > 0; returns (α, β, residuals).

    A negative intercept is refitted through the origin; a non-positive slope (a flat profile)
    becomes a tiny positive one so balancing still has an order.
    """
    b = np.asarray(bsz, dtype=float)
    t = np.asarray(time_s, dtype=float)
    design = np.column_stack([np.ones_like(b), b])
    (alpha, beta), *_ = np.linalg.lstsq(design, t, rcond=None)
    if alpha < 0:
        alpha, beta = 0.0, float(b @ t / (b @ b))
    if beta <= 0:
        alpha, beta = float(t.mean()), 1e-9
    return float(alpha), float(beta), t - (alpha + beta * b)


def fit_profile(profile: SiaProfile, flavor: GpuFlavor | None = None) -> StepTimeFit:
    """Fit α and β to a profile (see the module docstring for which rows)."""
    single = profile.rows_with_gpus(1)
    rows_used = "single-GPU"
    if len({profile.local_bsz[i] for i in single}) < 3:
        single = tuple(range(profile.n_rows))
        rows_used = "all placements"
    b = [float(profile.local_bsz[i]) for i in single]
    t = [profile.step_time_s[i] - profile.sync_time_s[i] for i in single]
    if len(set(b)) < 2:
        raise NoProfileError(
            f"profile of {profile.model!r} on {profile.flavor.short} has fewer than two batch "
            "sizes; cannot fit a step-time line"
        )
    alpha, beta, res = fit_linear(b, t)
    tt = np.asarray(t)
    ss_tot = float(((tt - tt.mean()) ** 2).sum())
    r2 = 1.0 - float((res**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return StepTimeFit(
        model=profile.model, flavor=flavor or profile.flavor, source_flavor=profile.flavor,
        alpha_s=alpha, beta_s_per_sample=beta, r2=r2,
        rmse_s=float(np.sqrt((res**2).mean())), max_abs_residual_s=float(np.abs(res).max()),
        n_points=len(b), min_bsz=int(min(b)), max_bsz=int(max(b)),
        max_local_bsz=profile.max_local_bsz, rows_used=rows_used,
    )


#: Models whose profiles cannot be fitted for data parallelism, with the reason.
UNFITTABLE: dict[str, str] = {
    "gpt_pmp": "gpt_pmp was profiled only as a pipeline-parallel job on 8-128 GPUs "
               "(local_bsz 1-2); there is no per-GPU step time to fit",
}


class CostModel:
    """Step time, memory cap and all-reduce time per (model, flavor): one shared object.

    Fits are computed on first use and cached; the object is otherwise immutable, so the
    planner and the simulator can share one instance.

    Args:
        root: a directory of Sia profiles to read instead of the bundled copy.
        model_params: parameter counts per model (for gradient sizes); defaults to
            :data:`SIA_MODEL_PARAMS`.
        estimate_unprofiled: answer for flavors without a profile with a roofline estimate
            (:mod:`tessera.perf.roofline`) instead of raising :class:`NoProfileError`.
    """

    def __init__(self, root: str | Path | None = None,
                 model_params: dict[str, float] | None = None,
                 estimate_unprofiled: bool = False) -> None:
        self._root = root
        self._params = dict(SIA_MODEL_PARAMS if model_params is None else model_params)
        self._fits: dict[tuple[str, str], StepTimeFit] = {}
        self._estimate = estimate_unprofiled
        self._roofline: Roofline | None = None

    def roofline(self) -> Roofline:
        """The roofline model calibrated on this cost model's profiles and Gavel's."""
        if self._roofline is None:
            self._roofline = Roofline(self, default_throughputs())
        return self._roofline

    def measured_flavors(self, model: str) -> tuple[GpuFlavor, ...]:
        """Flavors with a profile of ``model`` (no twins, no estimates)."""
        self._check_model(model)
        return sia_flavors(model, self._root)

    def models(self) -> tuple[str, ...]:
        """Models the cost model can answer for."""
        return tuple(m for m in sia_models(self._root) if m not in UNFITTABLE)

    def flavors(self, model: str) -> tuple[GpuFlavor, ...]:
        """Flavors with data for ``model``, including same-silicon twins."""
        self._check_model(model)
        direct = sia_flavors(model, self._root)
        twins = tuple(t for t, src in SAME_SILICON.items() if src in direct)
        return direct + twins

    def _check_model(self, model: str) -> None:
        if model in UNFITTABLE:
            raise NoProfileError(f"{UNFITTABLE[model]}; data-parallel models: "
                                 f"{', '.join(self.models())}")
        if model not in sia_models(self._root):
            raise NoProfileError(f"no profile for model {model!r}; known models: "
                                 f"{', '.join(self.models())}")

    def fit(self, model: str, flavor: GpuFlavor) -> StepTimeFit:
        """The step-time fit of ``model`` on ``flavor``.

        Raises:
            NoProfileError: no data for the model, or for the flavor (message lists what exists).
        """
        fl = flavor
        key = (model, fl.name)
        if key not in self._fits:
            self._check_model(model)
            source = SAME_SILICON.get(fl, fl)
            measured = {f.name for f in sia_flavors(model, self._root)}
            if source.name not in measured:
                if self._estimate:
                    self._fits[key] = self._estimated_fit(model, fl)
                    return self._fits[key]
                have = ", ".join(f.short for f in self.flavors(model))
                raise NoProfileError(
                    f"no step-time profile for model {model!r} on {fl.short}; "
                    f"profiled flavors: {have}"
                )
            self._fits[key] = fit_profile(load_sia_profile(model, source, self._root), fl)
        return self._fits[key]

    def _estimated_fit(self, model: str, flavor: GpuFlavor) -> StepTimeFit:
        """A roofline estimate: the fastest profiled flavor's fit, per-sample time scaled by
        the ratio of sustained FLOP/s (``cnn`` class); batch cap scaled down by memory."""
        rl = self.roofline()
        ref = max(self.measured_flavors(model),
                  key=lambda f: rl.sustained_flops_per_s(f, "cnn"))
        base = self.fit(model, ref)
        speedup = rl.sustained_flops_per_s(flavor, "cnn") / rl.sustained_flops_per_s(ref, "cnn")
        cap = base.max_local_bsz
        if flavor.mem_gib < ref.mem_gib:
            cap = math.floor(cap * flavor.mem_gib / ref.mem_gib)
        if cap < 1:
            raise NoProfileError(f"{model!r} is not estimated to fit on {flavor.short}")
        return StepTimeFit(
            model=model, flavor=flavor, source_flavor=ref, alpha_s=base.alpha_s,
            beta_s_per_sample=base.beta_s_per_sample / speedup, r2=base.r2,
            rmse_s=base.rmse_s, max_abs_residual_s=base.max_abs_residual_s,
            n_points=base.n_points, min_bsz=base.min_bsz, max_bsz=base.max_bsz,
            max_local_bsz=cap, estimated=True,
            rows_used=f"roofline estimate from {ref.short} ({speedup:.2f}x its speed)")

    def device_cost(self, model: str, flavor: GpuFlavor) -> DeviceCost:
        f = self.fit(model, flavor)
        return DeviceCost(f.flavor, f.alpha_s, f.beta_s_per_sample, f.max_local_bsz)

    def gradient_bytes(self, model: str) -> float:
        """Bytes each replica all-reduces per step."""
        self._check_model(model)
        if model not in self._params:
            raise NoProfileError(f"parameter count of {model!r} unknown; pass model_params")
        return self._params[model] * GRAD_BYTES_PER_PARAM

    def allreduce_s(self, model: str, ring: RingPath) -> float:
        return allreduce_time_s(self.gradient_bytes(model), ring)

    def achieved_flops_per_s(self, flavor: GpuFlavor) -> float:
        """Training FLOP/s a flavor sustains, calibrated on the ResNet-50 (``imagenet``) profile.

        ``RESNET50_TRAIN_FLOPS / β`` for profiled flavors. Other flavors get their peak tensor
        (or FP32) rate times the median achieved/peak ratio of the profiled ones. Used to time
        layer-wise model descriptions, for which no profile exists.
        """
        fl = flavor
        try:
            return RESNET50_TRAIN_FLOPS / self.fit("imagenet", fl).beta_s_per_sample
        except NoProfileError:
            pass
        ratios = [
            RESNET50_TRAIN_FLOPS / self.fit("imagenet", p).beta_s_per_sample / _peak_flops(p)
            for p in sia_flavors("imagenet", self._root)
        ]
        return statistics.median(ratios) * _peak_flops(fl)


def _peak_flops(flavor: GpuFlavor) -> float:
    return (flavor.fp16_tensor_tflops or flavor.fp32_tflops) * 1e12
