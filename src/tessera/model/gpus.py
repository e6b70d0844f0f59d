"""The GPU catalog: every flavor Tessera knows, with the numbers that matter for scheduling.

A *flavor* is a kind of GPU a job may run on. Its canonical name is the value NVIDIA's GPU
feature discovery puts in the ``nvidia.com/gpu.product`` node label (``Tesla-V100-SXM2-16GB``,
``NVIDIA-A100-SXM4-80GB``), so a Kubernetes or Ray user recognises it. People rarely type those,
so every flavor also answers to short, case-insensitive aliases (``v100``, ``a100-80gb``) and to
Ray's accelerator-type string.

Peak numbers are per GPU (a K80 board holds two GPUs; Gavel schedules each one) and come from
NVIDIA's data sheets: FP32 TFLOPS, dense FP16 tensor-core TFLOPS (``None`` before Volta, which has
no tensor cores), memory bandwidth, board power (TDP) and memory. They are used where no measured
profile exists, to rank flavors and to size models -- never in place of a measurement.

The two Ada Lovelace data-centre cards, from NVIDIA's product data sheets (tensor figures are
dense; the sheets print twice as much "with sparsity"): **L4** -- 24 GB GDDR6 at 300 GB/s,
30.3 TFLOPS FP32, 121 TFLOPS FP16/BF16 tensor (242 with sparsity), 72 W, PCIe Gen4 x16, no
NVLink; **L40S** -- 48 GB GDDR6 at 864 GB/s, 91.6 TFLOPS FP32, 362 TFLOPS FP16/BF16 tensor
(733 with sparsity), 350 W, PCIe Gen4 x16, no NVLink, no MIG. Servers of either therefore get
PCIe between their GPUs (:mod:`tessera.model.nodes`). Ray names them ``L4`` and ``L40S``.

>>> resolve_flavor("v100").name
'Tesla-V100-SXM2-16GB'
>>> resolve_flavor("A100-80GB").short
'A100-80GB'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tessera.errors import UnknownFlavorError


def _key(name: str) -> str:
    """Normalise a name for lookup: lower case, '_' and spaces as '-'."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


_BY_KEY: dict[str, GpuFlavor] = {}
"""Every name and alias of the catalog (normalised by :func:`_key`) → its flavor."""


@dataclass(frozen=True, slots=True, eq=False)
class GpuFlavor:
    """One kind of GPU.

    A flavor is resolved from its name once, where a name enters Tessera (a trace row, a job
    spec, a cluster file); below that edge code holds the flavor itself.

    Each flavor exists once: the catalog's object. So flavors compare and hash by identity,
    at C speed (the scheduler keys its free-GPU books, rates and placements by flavor and looks
    them up millions of times in a long simulation); a copy or an unpickled flavor (Ray and
    multiprocessing ship them between processes) is the catalog's own object, and building a
    second flavor under a catalog name is refused. Flavors do not order: sort them by
    :attr:`short` where a table lists them by name.

    Attributes:
        name: canonical name, the ``nvidia.com/gpu.product`` label value.
        short: short display name used in tables (``V100-16GB``).
        arch: NVIDIA architecture (Kepler, Pascal, Volta, Turing, Ampere, Ada, Hopper).
        mem_gib: device memory.
        fp32_tflops: peak FP32 throughput.
        fp16_tensor_tflops: peak dense FP16 tensor-core throughput, ``None`` without tensor cores.
        mem_bw_gbps: memory bandwidth in GB/s.
        tdp_w: board power limit per GPU.
        mig_capable: whether the GPU supports Multi-Instance GPU partitioning.
        bf16: whether the GPU computes in bfloat16 natively (Ampere and later).
        ray_accelerator_type: Ray's ``accelerator_type`` string for this GPU.
        aliases: extra names accepted on input (matched case-insensitively).
    """

    name: str
    short: str
    arch: str
    mem_gib: float
    fp32_tflops: float
    fp16_tensor_tflops: float | None
    mem_bw_gbps: float
    tdp_w: float
    mig_capable: bool
    bf16: bool
    ray_accelerator_type: str
    aliases: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.short

    def __repr__(self) -> str:
        return f"GpuFlavor({self.short!r})"

    def __post_init__(self) -> None:
        if _key(self.name) in _BY_KEY:
            raise ValueError(f"GPU flavor {self.name!r} is in the catalog already: take it with "
                             "resolve_flavor(), never build a second one")

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (resolve_flavor, (self.name,))


CATALOG: tuple[GpuFlavor, ...] = (
    GpuFlavor("Tesla-K80", "K80", "Kepler", 12, 4.37, None, 240, 150, False, False, "K80",
              ("k80",)),
    GpuFlavor("Tesla-P100-PCIE-16GB", "P100", "Pascal", 16, 9.3, None, 732, 250, False, False,
              "P100", ("p100", "p100-16gb")),
    GpuFlavor("Tesla-P40", "P40", "Pascal", 24, 11.8, None, 346, 250, False, False, "P40",
              ("p40",)),
    GpuFlavor("Tesla-V100-SXM2-16GB", "V100-16GB", "Volta", 16, 15.7, 125, 900, 300, False, False,
              "V100", ("v100", "v100-16gb", "v100-sxm2-16gb")),
    GpuFlavor("Tesla-V100-SXM2-32GB", "V100-32GB", "Volta", 32, 15.7, 125, 900, 300, False, False,
              "V100", ("v100-32gb", "v100-sxm2-32gb")),
    GpuFlavor("Tesla-T4", "T4", "Turing", 16, 8.1, 65, 320, 70, False, False, "T4", ("t4",)),
    GpuFlavor("NVIDIA-GeForce-RTX-2080-Ti", "RTX-2080Ti", "Turing", 11, 13.4, 53.8, 616, 250,
              False, False, "RTX", ("rtx2080ti", "rtx-2080-ti", "2080ti", "rtx")),
    GpuFlavor("Quadro-RTX-6000", "RTX-6000", "Turing", 24, 16.3, 130.5, 672, 260, False, False,
              "RTX6000", ("rtx6000", "quadro-rtx-6000", "quadro", "quad")),
    GpuFlavor("NVIDIA-A10", "A10", "Ampere", 24, 31.2, 125, 600, 150, False, True, "A10",
              ("a10",)),
    GpuFlavor("NVIDIA-L4", "L4", "Ada", 24, 30.3, 121, 300, 72, False, True, "L4", ("l4",)),
    GpuFlavor("NVIDIA-L40S", "L40S", "Ada", 48, 91.6, 362, 864, 350, False, True, "L40S",
              ("l40s", "l40-s")),
    GpuFlavor("NVIDIA-A100-SXM4-40GB", "A100-40GB", "Ampere", 40, 19.5, 312, 1555, 400, True,
              True, "A100-40G", ("a100-40gb", "a100-sxm4-40gb", "a100-40g")),
    GpuFlavor("NVIDIA-A100-SXM4-80GB", "A100-80GB", "Ampere", 80, 19.5, 312, 2039, 400, True,
              True, "A100-80G", ("a100", "a100-80gb", "a100-sxm4-80gb", "a100-80g")),
    GpuFlavor("NVIDIA-H100-80GB-HBM3", "H100-80GB", "Hopper", 80, 67, 989, 3350, 700, True, True,
              "H100", ("h100", "h100-80gb", "h100-sxm5-80gb")),
    GpuFlavor("NVIDIA-H200", "H200-141GB", "Hopper", 141, 67, 989, 4800, 700, True, True, "H200",
              ("h200", "h200-141gb")),
)


for _f in CATALOG:
    for _alias in (_f.name, _f.short, *_f.aliases):
        _BY_KEY.setdefault(_key(_alias), _f)


def resolve_flavor(name: str) -> GpuFlavor:
    """Return the flavor a name or alias refers to.

    Raises:
        UnknownFlavorError: with the list of known flavors, when nothing matches.
    """
    flavor = _BY_KEY.get(_key(name))
    if flavor is None:
        known = ", ".join(f.short for f in CATALOG)
        raise UnknownFlavorError(f"unknown GPU flavor {name!r}; known flavors: {known}")
    return flavor


def resolve_flavors(names: Iterable[str | GpuFlavor]) -> tuple[GpuFlavor, ...]:
    """Resolve each name (flavors pass through), keeping the order; raises UnknownFlavorError."""
    return tuple(n if isinstance(n, GpuFlavor) else resolve_flavor(n) for n in names)


def all_flavors() -> tuple[GpuFlavor, ...]:
    """Every flavor in the catalog, oldest architecture first."""
    return CATALOG
