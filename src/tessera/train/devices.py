"""Which GPUs a training job runs on, how fast each is relative to the others, in what precision.

A heterogeneous data-parallel job runs one *rank* (process) per GPU. The device list names the
flavors and counts, like ``A100:1,T4:2`` (one A100 and two T4s: three ranks). Rank order follows
the list, so rank 0 is the A100 here.

Two facts about each rank come from the GPU catalog (:mod:`tessera.model.gpus`), never from a
guess:

* a **relative speed**, used as a prior for the first batch split and, on machines without GPUs,
  to emulate heterogeneity. It is the flavor's peak throughput in the precision the job computes
  in (dense fp16 tensor-core TFLOPS when every rank has tensor cores, otherwise fp32 TFLOPS),
  divided by the fastest rank's. Peak ratios are only a prior: the runtime measures real step
  times and rebalances (:mod:`tessera.train.balancer`).
* a **precision**: bf16 needs Ampere or newer (``GpuFlavor.bf16``); V100 and T4 have fp16 tensor
  cores only, so they compute in fp16 with loss scaling; GPUs without tensor cores use fp32.

>>> [s.flavor.short for s in parse_devices("A100:1,T4:2")]
['A100-80GB', 'T4', 'T4']
>>> relative_speeds(parse_devices("A100:1,T4:2"))
(1.0, 0.20833333333333334, 0.20833333333333334)
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor, resolve_flavor

MAX_RANKS_PER_ENTRY = 64
"""Upper bound on the count of one ``FLAVOR:COUNT`` entry, to catch typos like ``T4:200``."""


class Precision(enum.StrEnum):
    """The arithmetic a rank computes its forward and backward pass in."""

    BF16 = "bf16"
    """bfloat16 autocast; fp32 range, so no loss scaling (Ampere and newer)."""
    FP16 = "fp16"
    """float16 autocast with dynamic loss scaling (tensor cores without bf16: V100, T4, Turing)."""
    FP32 = "fp32"
    """full precision (no tensor cores: K80, P100, P40)."""


@dataclass(frozen=True, slots=True)
class DeviceSlot:
    """One rank of a training job: the GPU flavor it runs on.

    Attributes:
        rank: position in the job (0 is the coordinator that writes checkpoints and results).
        flavor: the catalog entry of its GPU.
    """

    rank: int
    flavor: GpuFlavor

    @property
    def precision(self) -> Precision:
        """The precision this rank computes in (see :func:`choose_precision`)."""
        return choose_precision(self.flavor)


def choose_precision(flavor: GpuFlavor) -> Precision:
    """Pick the fastest safe precision a flavor supports.

    >>> choose_precision(resolve_flavor("T4")), choose_precision(resolve_flavor("A100"))
    (<Precision.FP16: 'fp16'>, <Precision.BF16: 'bf16'>)
    """
    if flavor.bf16:
        return Precision.BF16
    if flavor.fp16_tensor_tflops is not None:
        return Precision.FP16
    return Precision.FP32


def parse_devices(text: str) -> tuple[DeviceSlot, ...]:
    """Parse a device list ``FLAVOR:COUNT[,FLAVOR:COUNT...]`` into one slot per rank.

    ``COUNT`` may be omitted (``A100,T4:2`` means one A100). Flavor names are resolved through
    the catalog's aliases.

    Raises:
        SpecError: the list is empty or an entry is not ``FLAVOR[:COUNT]`` with 1 ≤ COUNT ≤ 64.
        UnknownFlavorError: a flavor is not in the catalog.
    """
    if not text or not text.strip():
        raise SpecError("empty device list; expected e.g. 'A100:1,T4:2'")
    slots: list[DeviceSlot] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            raise SpecError(f"empty entry in device list {text!r}; expected e.g. 'A100:1,T4:2'")
        name, sep, count_text = entry.partition(":")
        if not name.strip():
            raise SpecError(f"device entry {entry!r} has no flavor name; expected FLAVOR:COUNT")
        count = 1
        if sep:
            try:
                count = int(count_text)
            except ValueError:
                raise SpecError(
                    f"device entry {entry!r}: count {count_text!r} is not an integer"
                ) from None
        if not 1 <= count <= MAX_RANKS_PER_ENTRY:
            raise SpecError(
                f"device entry {entry!r}: count must be between 1 and {MAX_RANKS_PER_ENTRY}"
            )
        flavor = resolve_flavor(name)
        first = len(slots)
        slots.extend(DeviceSlot(first + i, flavor) for i in range(count))
    return tuple(slots)


def speed_metric(flavors: Sequence[GpuFlavor]) -> str:
    """Name the catalog field that ranks these flavors: fp16 tensor TFLOPS if all have them."""
    if flavors and all(f.fp16_tensor_tflops is not None for f in flavors):
        return "fp16_tensor_tflops"
    return "fp32_tflops"


def relative_speeds(slots: Sequence[DeviceSlot]) -> tuple[float, ...]:
    """Each rank's peak throughput divided by the fastest rank's (the fastest gets 1.0)."""
    flavors = [s.flavor for s in slots]
    metric = speed_metric(flavors)
    peaks = [float(getattr(f, metric)) for f in flavors]
    top = max(peaks)
    return tuple(p / top for p in peaks)


def describe_devices(slots: Sequence[DeviceSlot]) -> str:
    """A compact summary such as ``1×A100-80GB + 2×T4``."""
    counts: dict[str, int] = {}
    for s in slots:
        counts[s.flavor.short] = counts.get(s.flavor.short, 0) + 1
    return " + ".join(f"{n}×{name}" for name, n in counts.items())
