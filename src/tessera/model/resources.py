"""Host resources a job asks for besides GPUs: CPU cores and host memory.

GPU counts are not the only thing a training job competes for. Its data loaders decode and
augment samples on CPU cores and cache them in host memory; Synergy (Mohan et al., OSDI'22)
measured that ResNet-18 trains 2.4x faster with 9 CPUs per GPU than with the GPU-proportional
3, while a language model gains nothing. Two typed objects carry that here:

- :class:`HostDemand` -- what a job asks for, as its user wrote it: CPUs and memory *per GPU*
  (the usual Kubernetes/Kueue habit for a data-parallel worker) or *per job* (one total split
  evenly over the gang). A job without one gets the GPU-proportional share of the server it
  lands on (:func:`proportional_share`), which is what every scheduler that counts GPUs only
  implicitly assumes.
- :class:`ResourceSensitivity` -- how fast the job trains as a function of CPUs and memory per
  GPU: a table of measured points, each a throughput relative to the proportional point. It
  must contain the proportional point (relative speed 1.0) and be monotone (more CPUs or more
  memory never slows a job down); both are checked here, at the edge, so no decision ever sees
  a malformed profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.errors import SpecError


def _check_amount(what: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{what} must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise SpecError(f"{what} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class HostDemand:
    """CPUs and host memory a job asks for.

    Attributes:
        cpus: CPU cores (fractions allowed, as in Kubernetes ``cpu: 1.5``).
        mem_gib: host memory in GiB.
        per_gpu: ``True`` when both amounts are per GPU of the gang (the default), ``False``
            when they are the job's total, split evenly over its GPUs.
    """

    cpus: float
    mem_gib: float
    per_gpu: bool = True

    def __post_init__(self) -> None:
        _check_amount("host demand cpus", self.cpus)
        _check_amount("host demand mem_gib", self.mem_gib)

    def total(self, num_gpus: int) -> tuple[float, float]:
        """The job's total ``(cpus, mem_gib)`` on a gang of ``num_gpus`` GPUs."""
        if self.per_gpu:
            return self.cpus * num_gpus, self.mem_gib * num_gpus
        return self.cpus, self.mem_gib

    def per_gpu_amounts(self, num_gpus: int) -> tuple[float, float]:
        """``(cpus, mem_gib)`` per GPU on a gang of ``num_gpus`` GPUs."""
        if self.per_gpu:
            return self.cpus, self.mem_gib
        n = max(1, num_gpus)
        return self.cpus / n, self.mem_gib / n


def proportional_share(
    gpus: int, node_gpus: int, node_cpu_cores: float, node_mem_gib: float
) -> tuple[float, float]:
    """The GPU-proportional ``(cpus, mem_gib)`` of ``gpus`` GPUs on a server.

    A server of 8 GPUs, 24 cores and 500 GiB gives each GPU 3 cores and 62.5 GiB; this is
    Synergy's "fair" (GPU-proportional) allocation and what a job without a
    :class:`HostDemand` receives.
    """
    if node_gpus <= 0:
        return 0.0, 0.0
    frac = gpus / node_gpus
    return node_cpu_cores * frac, node_mem_gib * frac


@dataclass(frozen=True, slots=True)
class SensitivityPoint:
    """One measured point: CPUs and memory per GPU and the relative throughput there."""

    cpus_per_gpu: float
    mem_gib_per_gpu: float
    speedup: float

    def __post_init__(self) -> None:
        _check_amount("sensitivity cpus_per_gpu", self.cpus_per_gpu)
        _check_amount("sensitivity mem_gib_per_gpu", self.mem_gib_per_gpu)
        _check_amount("sensitivity speedup", self.speedup)
        if self.speedup == 0:
            raise SpecError("sensitivity speedup must be > 0")


@dataclass(frozen=True, slots=True)
class ResourceSensitivity:
    """A job's throughput as a function of CPUs and host memory per GPU.

    ``points`` are measured (or profiled) settings; ``proportional`` names the
    GPU-proportional setting, whose speedup must be 1.0 and which must be one of the points.
    Throughput between points is read by :meth:`speedup_at` as the best measured point that
    the allocation covers (a step function: a job given at least a point's CPUs and memory
    trains at least that fast), which keeps the profile monotone by construction and never
    extrapolates beyond what was measured.
    """

    points: tuple[SensitivityPoint, ...]
    proportional_cpus_per_gpu: float
    proportional_mem_gib_per_gpu: float

    def __post_init__(self) -> None:
        if not self.points:
            raise SpecError("a sensitivity profile needs at least one point")
        base = [
            p for p in self.points
            if p.cpus_per_gpu == self.proportional_cpus_per_gpu
            and p.mem_gib_per_gpu == self.proportional_mem_gib_per_gpu
        ]
        if not base:
            raise SpecError(
                f"sensitivity profile has no proportional point "
                f"({self.proportional_cpus_per_gpu} CPUs, "
                f"{self.proportional_mem_gib_per_gpu} GiB per GPU)"
            )
        if any(abs(p.speedup - 1.0) > 1e-9 for p in base):
            raise SpecError(
                f"sensitivity profile: the proportional point must have speedup 1.0, got "
                f"{base[0].speedup}"
            )
        for a in self.points:
            for b in self.points:
                dominates = (b.cpus_per_gpu >= a.cpus_per_gpu
                             and b.mem_gib_per_gpu >= a.mem_gib_per_gpu)
                if dominates and b.speedup < a.speedup - 1e-9:
                    raise SpecError(
                        "sensitivity profile is not monotone: "
                        f"{b.cpus_per_gpu} CPUs/{b.mem_gib_per_gpu} GiB gives {b.speedup}, "
                        f"less than {a.speedup} at {a.cpus_per_gpu} CPUs/"
                        f"{a.mem_gib_per_gpu} GiB"
                    )

    def speedup_at(self, cpus_per_gpu: float, mem_gib_per_gpu: float) -> float:
        """Relative throughput with the given CPUs and memory per GPU.

        The best point the allocation covers; below every point, the smallest measured
        speedup scaled down by the CPU shortfall against the least-CPU point (a job with half
        the CPUs it was measured at loads data at most half as fast).
        """
        covered = [
            p.speedup for p in self.points
            if p.cpus_per_gpu <= cpus_per_gpu + 1e-9 and p.mem_gib_per_gpu <= mem_gib_per_gpu + 1e-9
        ]
        if covered:
            return max(covered)
        least = min(self.points, key=lambda p: (p.cpus_per_gpu, p.mem_gib_per_gpu))
        if least.cpus_per_gpu <= 0:
            return least.speedup
        return least.speedup * min(1.0, max(cpus_per_gpu, 0.0) / least.cpus_per_gpu)
