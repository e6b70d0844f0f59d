"""A roofline step-time model for every GPU in the catalog, calibrated where measurements exist.

**Roofline.** A kernel that does F floating-point operations and moves B bytes through device
memory cannot finish faster than ``max(F / peak_flops, B / mem_bw)``: it is either compute- or
bandwidth-bound. Real training reaches only a fraction of the peak — the *efficiency* (for large
language models people call it MFU, model FLOPs utilisation) — so the model here is::

    t = max(F / (peak_flops × efficiency), B / mem_bw)

with the peak taken from the catalog (:mod:`tessera.model.gpus`): dense FP16/BF16 tensor-core
TFLOPS for mixed-precision work (FP32 on GPUs without tensor cores), FP32 for FP32 work.

**Calibration.** Efficiency depends on the workload and the GPU, so it is fitted per workload
class from measurements:

* ``cnn`` (mixed precision): ResNet-50 training on the Sia/Pollux profiles shipped with Tessera
  (24.6 GFLOP per image over the fitted per-image time, T4, V100, A100, RTX-2080Ti, RTX-6000);
* ``cnn-fp32``: Gavel's ResNet-50 (batch 64, one GPU) throughputs on K80, P100 and V100;
* ``transformer`` (mixed precision, large language models): published per-GPU throughputs —
  V100: 39 TFLOP/s for a 1.2B GPT-2 on one V100 (Shoeybi et al., "Megatron-LM", 2019, §5.1);
  A100: 502 PFLOP/s on 3072 A100s for a 1T-parameter GPT, 163 TFLOP/s per GPU (Narayanan et
  al., SC'21, abstract and Table 1); H100: 400 TFLOP/s per GPU training Llama 3 405B on 16,384
  H100s (Llama Team, "The Llama 3 Herd of Models", 2024, Table 4).

A GPU with a measurement in a class uses its own efficiency; a chip twin (A100-80GB of the
A100-40GB, V100-32GB of the V100-16GB, H200 of the H100, same silicon, more memory) uses its
twin's; every other GPU uses the median efficiency of the measured ones, and its times are
*estimates* (:attr:`Efficiency.measured` is False, and the planner says so). The calibration
error reported per GPU (:meth:`Roofline.calibration`) is leave-one-out: the error of predicting
that GPU's measurement from the other GPUs' median efficiency — what an estimate for an
unmeasured GPU can be expected to be off by.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tessera.errors import NoProfileError
from tessera.model.gpus import CATALOG, GpuFlavor, resolve_flavor

if TYPE_CHECKING:
    from tessera.perf.profiles import ThroughputTable

#: Training FLOPs per ImageNet sample of ResNet-50 (4.1 GMAC forward, x2 FLOP/MAC, x3 fwd+bwd).
RESNET50_TRAIN_FLOPS = 24.6e9
WORKLOADS = ("transformer", "cnn", "cnn-fp32")


class _PerSampleFit(Protocol):
    @property
    def beta_s_per_sample(self) -> float: ...


class ProfileSource(Protocol):
    """What the roofline reads from a cost model (:class:`tessera.perf.steptime.CostModel`).

    Stated here, not imported, because the cost model builds its roofline from this module:
    the roofline sits below the cost model and must not import it.
    """

    def measured_flavors(self, model: str) -> Sequence[GpuFlavor]: ...

    def fit(self, model: str, flavor: GpuFlavor) -> _PerSampleFit: ...

#: Same chip, different memory: efficiency carries over.
CHIP_TWINS: dict[str, str] = {
    "A100-80GB": "A100-40GB",
    "V100-32GB": "V100-16GB",
    "H200-141GB": "H100-80GB",
}


@dataclass(frozen=True, slots=True)
class Measurement:
    """A sustained training FLOP/s measured (or published) for one GPU and workload class."""

    workload: str
    flavor: GpuFlavor
    achieved_flops_per_s: float
    source: str


#: Published large-language-model training throughputs per GPU (see the module docstring).
PUBLISHED_LLM: tuple[Measurement, ...] = (
    Measurement("transformer", resolve_flavor("V100-32GB"), 39e12,
                "Megatron-LM (Shoeybi et al. 2019) 1.2B GPT-2, 1 x V100: 39 TFLOP/s"),
    Measurement("transformer", resolve_flavor("A100-80GB"), 502e15 / 3072,
                "Megatron-LM (Narayanan et al. SC'21) 1T GPT, 3072 x A100: 502 PFLOP/s"),
    Measurement("transformer", resolve_flavor("H100-80GB"), 400e12,
                "Llama 3 (2024) Table 4, 16,384 x H100: 400 TFLOP/s per GPU"),
)


def peak_flops_per_s(flavor: GpuFlavor, workload: str) -> float:
    """The catalog peak that bounds ``workload`` on ``flavor``."""
    if workload == "cnn-fp32" or flavor.fp16_tensor_tflops is None:
        return flavor.fp32_tflops * 1e12
    return flavor.fp16_tensor_tflops * 1e12


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fraction of peak a GPU sustains on a workload class, and where the number comes from."""

    value: float
    measured: bool
    source: str


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """One GPU's measurement beside the leave-one-out roofline prediction."""

    workload: str
    flavor: GpuFlavor
    measured_flops_per_s: float
    predicted_flops_per_s: float

    @property
    def error(self) -> float:
        return self.predicted_flops_per_s / self.measured_flops_per_s - 1.0


class Roofline:
    """Sustained FLOP/s and roofline times for every catalog GPU (see the module docstring).

    Args:
        cost_model: where the ``cnn`` class's measurements come from (Sia fits).
        throughputs: where the ``cnn-fp32`` class's come from (Gavel); ``None`` skips it.
    """

    def __init__(self, cost_model: ProfileSource, throughputs: ThroughputTable | None = None
                 ) -> None:
        self._measurements: dict[str, list[Measurement]] = {w: [] for w in WORKLOADS}
        self._measurements["transformer"] = list(PUBLISHED_LLM)
        for f in cost_model.measured_flavors("imagenet"):
            beta = cost_model.fit("imagenet", f).beta_s_per_sample
            self._measurements["cnn"].append(Measurement(
                "cnn", f, RESNET50_TRAIN_FLOPS / beta, "Sia/Pollux imagenet profile"))
        if throughputs is not None:
            for f in CATALOG:
                if not throughputs.covers(f):
                    continue
                look = throughputs.lookup("ResNet-50 (batch size 64)", f, 1, True)
                if look.measured and look.steps_per_s > 0 and f.short not in CHIP_TWINS:
                    self._measurements["cnn-fp32"].append(Measurement(
                        "cnn-fp32", f, look.steps_per_s * 64 * RESNET50_TRAIN_FLOPS,
                        "Gavel ResNet-50 (batch 64), 1 GPU"))

    def measurements(self, workload: str) -> tuple[Measurement, ...]:
        return tuple(self._measurements[_check(workload)])

    def _own(self, flavor: GpuFlavor, workload: str) -> list[float]:
        return [m.achieved_flops_per_s / peak_flops_per_s(m.flavor, workload)
                for m in self._measurements[workload] if m.flavor == flavor]

    def efficiency(self, flavor: GpuFlavor, workload: str) -> Efficiency:
        """Measured efficiency of ``flavor`` (or its chip twin), else the measured median."""
        _check(workload)
        own = self._own(flavor, workload)
        if own:
            return Efficiency(statistics.median(own), True, "measured")
        for twin in chip_twins(flavor):
            own = self._own(twin, workload)
            if own:
                return Efficiency(statistics.median(own), True,
                                  f"measured on {twin.short} (same chip)")
        pool = [m.achieved_flops_per_s / peak_flops_per_s(m.flavor, workload)
                for m in self._measurements[workload]]
        if not pool:
            raise NoProfileError(f"no measurements to calibrate workload {workload!r}")
        return Efficiency(statistics.median(pool), False,
                          f"estimate: median efficiency of {len(pool)} measured GPUs")

    def sustained_flops_per_s(self, flavor: GpuFlavor, workload: str) -> float:
        return peak_flops_per_s(flavor, workload) * self.efficiency(flavor, workload).value

    def time_s(self, flops: float, mem_bytes: float, flavor: GpuFlavor, workload: str) -> float:
        """Roofline time of work doing ``flops`` and moving ``mem_bytes`` through memory."""
        return max(flops / self.sustained_flops_per_s(flavor, workload),
                   mem_bytes / (flavor.mem_bw_gbps * 1e9))

    def calibration(self, workload: str) -> list[CalibrationRow]:
        """Leave-one-out prediction error per measured GPU (see the module docstring)."""
        rows = []
        ms = self._measurements[_check(workload)]
        for m in ms:
            others = [o.achieved_flops_per_s / peak_flops_per_s(o.flavor, workload)
                      for o in ms if o.flavor != m.flavor]
            if not others:
                continue
            predicted = statistics.median(others) * peak_flops_per_s(m.flavor, workload)
            rows.append(CalibrationRow(workload, m.flavor, m.achieved_flops_per_s, predicted))
        return rows


def chip_twins(flavor: GpuFlavor) -> tuple[GpuFlavor, ...]:
    """Flavors built on the same chip as ``flavor`` (either direction of :data:`CHIP_TWINS`)."""
    names = [b for a, b in CHIP_TWINS.items() if a == flavor.short]
    names += [a for a, b in CHIP_TWINS.items() if b == flavor.short]
    return tuple(resolve_flavor(n) for n in names)


def _check(workload: str) -> str:
    if workload not in WORKLOADS:
        raise NoProfileError(f"unknown workload class {workload!r}; known: {', '.join(WORKLOADS)}")
    return workload
