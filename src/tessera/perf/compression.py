"""Gradient compression schemes: their names, their bytes on the wire and their codec compute.

One module, without torch, that both the training runtime (:mod:`tessera.train.compression`)
and the planner (:mod:`tessera.plan.dp`) read, so that what ``tessera train --compress`` sends and
what ``tessera plan --compress`` charges come from the same formulas.

Schemes (``--compress``):

* ``none`` -- the fp32 (or fp64) gradient, one ring all-reduce of ``P`` elements;
* ``fp16`` / ``bf16`` -- PyTorch's ``fp16_compress_hook`` / ``bf16_compress_hook``: the
  all-reduce runs in 16-bit floats, 2 bytes per element;
* ``powersgd[:rank=R,start=S]`` -- PyTorch's ``powerSGD_hook`` (Vogels et al., NeurIPS'19):
  every gradient matrix ``n × m`` (a tensor viewed as ``shape[0] × rest``) is sent as two
  low-rank factors ``P`` (``n × r``) and ``Q`` (``m × r``), with error feedback and warm start;
  vectors (biases) and matrices too small to gain (``(n + m)·r·2 ≥ n·m``, PyTorch's
  ``min_compression_rate`` of 2) go uncompressed. Three all-reduces per step (uncompressed
  tensors, the Ps, the Qs). The first ``S`` steps run plain all-reduce (PyTorch's
  ``start_powerSGD_iter``; at least 2 with error feedback);
* ``3lc[:s=S]`` -- 3LC (Lim et al., MLSys'19, :mod:`tessera.train.threelc`): three values per
  element, five per byte, zero runs squeezed. The messages differ in size per rank and cannot be
  summed while encoded, so the ranks *all-gather* them and every rank decodes and sums.

**Bytes on the wire.** With the tensor shapes known (the runtime), :func:`wire_collectives` is
exact for ``none``/``fp16``/``bf16``/``powersgd`` and an upper bound for 3LC, whose zero-run
encoding only shrinks the ``⌈n/5⌉`` bytes of a tensor further (how much depends on the gradient;
the runtime counts the real bytes). The planner knows only a model's parameter count ``P``; it
assumes the gradient is square matrices of width :data:`PLANNER_MATRIX_WIDTH` (1024: ResNet-50's
and BERT's layers are 256 to 4096 wide), so PowerSGD sends ``P · 2r / 1024`` elements, and charges
3LC its bound of ``P / 5`` bytes (1.6 bits per element).

**Codec compute** (planner only; the runtime measures it): memory passes over the gradient at the
device's memory bandwidth, plus PowerSGD's three ``n × m × r`` matrix products at its FP32 peak:

* fp16/bf16: cast down and back up: 12 bytes per element;
* 3LC: error feedback, max, quantise, pack, decode of every rank's message, residual: about
  ``28 + 4·N`` bytes per element for N ranks;
* PowerSGD: ``6·r`` FLOPs per element plus 16 bytes per element of error feedback;

plus :data:`KERNEL_LAUNCH_S` per GPU kernel, which dominates for small models on fast links:
fp16/bf16 run 2 kernels a step, 3LC about 10 per tensor, PowerSGD ``3 + 2r`` per matrix (three
products, Gram-Schmidt over ``r`` columns), with ``P / 1024²`` matrices (tensors) assumed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.comm import RingPath, allgather_time_s, allreduce_time_s

SCHEMES = ("none", "fp16", "bf16", "powersgd", "3lc")
"""Every ``--compress`` scheme (``auto`` is a planner choice among these, not a scheme)."""
DEFAULT_POWERSGD_RANK = 4
DEFAULT_POWERSGD_START = 2
"""PyTorch's minimum ``start_powerSGD_iter`` with error feedback or warm start."""
PLANNER_MATRIX_WIDTH = 1024
"""The planner's assumed width of a gradient matrix when only the parameter count is known."""
POWERSGD_MIN_COMPRESSION_RATE = 2.0
"""PyTorch's default: a matrix is compressed only when that shrinks it at least 2×."""
KERNEL_LAUNCH_S = 10e-6
"""Launch and synchronisation cost of one small GPU kernel."""
THREELC_HEADER_BYTES = 8
"""Per tensor in a 3LC message: its fp32 scale and its payload length (uint32)."""


@dataclass(frozen=True, slots=True)
class CompressionSpec:
    """A parsed ``--compress`` value.

    Attributes:
        scheme: one of :data:`SCHEMES`.
        rank: PowerSGD's matrix approximation rank ``r`` (unused otherwise).
        start_step: PowerSGD's first compressed step (plain all-reduce before).
        sparsity: 3LC's sparsity multiplier ``s`` in ``[1, 2)``: the scale is ``s · max|g|``,
            so larger ``s`` rounds more elements to zero (1.0: plain 3-value quantisation).
    """

    scheme: str = "none"
    rank: int = DEFAULT_POWERSGD_RANK
    start_step: int = DEFAULT_POWERSGD_START
    sparsity: float = 1.0

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise SpecError(f"unknown compression scheme {self.scheme!r}; choose one of: "
                            f"{', '.join(SCHEMES)} (e.g. powersgd:rank=4)")
        if self.rank < 1:
            raise SpecError(f"powersgd rank must be ≥ 1, got {self.rank}")
        if self.start_step < 2:
            raise SpecError(f"powersgd start must be ≥ 2 (PyTorch needs one plain all-reduce "
                            f"before error feedback starts), got {self.start_step}")
        if not 1.0 <= self.sparsity < 2.0:
            raise SpecError(f"3lc sparsity multiplier s must be in [1, 2), got {self.sparsity}")

    def __str__(self) -> str:
        if self.scheme == "powersgd":
            return f"powersgd:rank={self.rank},start={self.start_step}"
        if self.scheme == "3lc" and self.sparsity != 1.0:
            return f"3lc:s={self.sparsity:g}"
        return self.scheme


_OPTIONS = {"powersgd": {"rank": "rank", "start": "start_step"}, "3lc": {"s": "sparsity"}}


def parse_compression(text: str) -> CompressionSpec:
    """Parse ``SCHEME[:key=value,...]`` (``fp16``, ``powersgd:rank=8``, ``3lc:s=1.5``).

    Raises:
        SpecError: an unknown scheme, an option the scheme does not take, a bad value.
    """
    scheme, _, rest = text.strip().lower().partition(":")
    if scheme not in SCHEMES:
        raise SpecError(f"unknown compression scheme {scheme!r}; choose one of: "
                        f"{', '.join(SCHEMES)} (e.g. powersgd:rank=4)")
    fields: dict[str, float | int] = {}
    allowed = _OPTIONS.get(scheme, {})
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in allowed:
            names = ", ".join(f"{k}=" for k in allowed) or "none"
            raise SpecError(f"--compress {text!r}: {scheme} takes options {names}; "
                            f"got {item!r}")
        name = allowed[key.strip()]
        try:
            fields[name] = float(value) if name == "sparsity" else int(value)
        except ValueError:
            raise SpecError(f"--compress {text!r}: {key} needs a number, got {value!r}") \
                from None
    return CompressionSpec(scheme, **fields)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective of a step: ``allreduce`` of ``bytes_per_rank`` on every rank, or
    ``allgather`` of each rank's own message (``bytes_per_rank`` then is the mean size)."""

    kind: str
    bytes_per_rank: float


def matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """The matrix PowerSGD compresses a tensor as: ``shape[0] × (the rest)``."""
    if len(shape) == 0:
        return 1, 1
    return int(shape[0]), int(math.prod(shape[1:]))


def powersgd_compresses(n: int, m: int, rank: int) -> bool:
    """PyTorch's test: compress ``n × m`` at ``min(n, m, rank)`` only if it pays 2×."""
    r = min(n, m, rank)
    return (n + m) * r * POWERSGD_MIN_COMPRESSION_RATE < n * m


def max_matrix_rank(shapes: Sequence[Sequence[int]]) -> int:
    """The largest matrix rank among the gradient tensors of ≥ 2 dimensions (0 if none)."""
    return max((min(matrix_shape(s)) for s in shapes if len(s) >= 2), default=0)


def wire_collectives(spec: CompressionSpec, shapes: Sequence[Sequence[int]],
                     element_bytes: int = 4, *, compressed_step: bool = True
                     ) -> tuple[Collective, ...]:
    """The collectives one step of ``spec`` runs for gradient tensors of ``shapes``.

    Args:
        spec: the scheme.
        shapes: the gradient tensors' shapes, in order.
        element_bytes: bytes per uncompressed element (4 for fp32, 8 for fp64).
        compressed_step: ``False`` for PowerSGD's plain warm-up steps.
    """
    sizes = [math.prod(s) for s in shapes]
    total = sum(sizes)
    if spec.scheme == "none" or (spec.scheme == "powersgd" and not compressed_step):
        return (Collective("allreduce", total * element_bytes),)
    if spec.scheme in ("fp16", "bf16"):
        return (Collective("allreduce", total * 2),)
    if spec.scheme == "powersgd":
        plain, ps, qs = 0, 0, 0
        for shape, size in zip(shapes, sizes, strict=True):
            n, m = matrix_shape(shape)
            if len(shape) >= 2 and powersgd_compresses(n, m, spec.rank):
                r = min(n, m, spec.rank)
                ps, qs = ps + n * r, qs + m * r
            else:
                plain += size
        return tuple(Collective("allreduce", k * element_bytes) for k in (plain, ps, qs))
    return (Collective("allgather", sum(THREELC_HEADER_BYTES + math.ceil(k / 5)
                                        for k in sizes)),)


def planner_collectives(spec: CompressionSpec, grad_bytes: float
                        ) -> tuple[Collective, ...]:
    """:func:`wire_collectives` for a model known only by its gradient bytes (fp32).

    The gradient is taken as square matrices of width :data:`PLANNER_MATRIX_WIDTH` (see the
    module docstring), so the PowerSGD and 3LC figures are estimates.
    """
    n_params = grad_bytes / 4.0
    if spec.scheme == "none":
        return (Collective("allreduce", grad_bytes),)
    if spec.scheme in ("fp16", "bf16"):
        return (Collective("allreduce", 2 * n_params),)
    if spec.scheme == "powersgd":
        w = PLANNER_MATRIX_WIDTH
        r = min(spec.rank, w)
        if not powersgd_compresses(w, w, r):
            return (Collective("allreduce", grad_bytes),)
        factor_bytes = n_params / (w * w) * w * r * 4
        return (Collective("allreduce", 0.0), Collective("allreduce", factor_bytes),
                Collective("allreduce", factor_bytes))
    return (Collective("allgather", n_params / 5),)


def collectives_time_s(collectives: Sequence[Collective], ring: RingPath) -> float:
    """Time of the collectives, one after the other, on ``ring`` (every one pays latency)."""
    total = 0.0
    for c in collectives:
        if c.kind == "allreduce":
            if ring.n_workers > 1:  # even an empty all-reduce pays its latency steps
                total += max(allreduce_time_s(c.bytes_per_rank, ring),
                             2 * (ring.n_workers - 1) * ring.latency_us * 1e-6)
        else:
            total += allgather_time_s([c.bytes_per_rank] * ring.n_workers, ring)
    return total


def codec_time_s(spec: CompressionSpec, n_params: float, flavor: GpuFlavor,
                 n_workers: int) -> float:
    """Predicted encode + decode time of one step on ``flavor`` (see the module docstring)."""
    mem_bytes_per_s = flavor.mem_bw_gbps * 1e9
    if spec.scheme == "none" or n_workers <= 1:
        return 0.0
    if spec.scheme in ("fp16", "bf16"):
        return 12 * n_params / mem_bytes_per_s + 2 * KERNEL_LAUNCH_S
    tensors = max(1.0, n_params / PLANNER_MATRIX_WIDTH**2)
    if spec.scheme == "3lc":
        return ((28 + 4 * n_workers) * n_params / mem_bytes_per_s
                + 10 * tensors * KERNEL_LAUNCH_S)
    flops = 6 * spec.rank * n_params
    return (flops / (flavor.fp32_tflops * 1e12) + 16 * n_params / mem_bytes_per_s
            + (3 + 2 * spec.rank) * tensors * KERNEL_LAUNCH_S)


def exchange_time_s(spec: CompressionSpec, grad_bytes: float, ring: RingPath,
                    flavors: Sequence[GpuFlavor]) -> float:
    """The planner's gradient exchange time: wire time plus the slowest device's codec time.

    For ``none`` this is exactly :func:`~tessera.perf.comm.allreduce_time_s`.
    """
    if spec.scheme == "none":
        return allreduce_time_s(grad_bytes, ring)
    if ring.n_workers <= 1:
        return 0.0
    wire = collectives_time_s(planner_collectives(spec, grad_bytes), ring)
    codec = max(codec_time_s(spec, grad_bytes / 4.0, f, ring.n_workers) for f in flavors)
    return wire + codec
