"""Compressed gradient exchange for the heterogeneous runtime (``tessera train --compress``).

The runtime (:mod:`tessera.train.ddp`) sums one flat, batch-weighted gradient over the ranks:
rank i contributes ``(b_i/B) · ḡ_i`` and the sum is the full-batch gradient. An exchange here
replaces that one SUM all-reduce by a compressed one and returns the (approximate) sum:

* ``fp16`` / ``bf16`` call PyTorch's ``fp16_compress_hook`` / ``bf16_compress_hook``;
* ``powersgd`` runs :mod:`tessera.train.powersgd`: PyTorch's ``powerSGD_hook`` algorithm (error
  feedback and warm start on, its first factors and 2× rule, ``start`` plain steps first) with
  its matrix products laid out for row-major memory, 3× less CPU here; checked against the hook;
* ``3lc`` is ours (:mod:`tessera.train.threelc`), with a per-rank residual kept across steps.

**Why the runtime calls the hooks the way it does.** DDP hands a hook a ``GradBucket`` and
expects the *mean* over ranks: every PyTorch hook (and our PowerSGD, like the hook it replaces)
divides by the world size N. The runtime wants
the *weighted sum* ``Σ (b_i/B) ḡ_i``, so it hands the hook ``N · (b_i/B) · ḡ_i``: the mean of
those is exactly the weighted sum, and every scheme's error stays relative to the same values
DDP would have seen with equal batches (``b_i/B = 1/N``). The bucket is a small stand-in
(:class:`FlatBucket`) with the methods the hooks call -- ``buffer``, ``gradients`` (views of
the buffer, one per parameter, so PowerSGD compresses layer by layer), ``index`` (always 0:
one bucket), ``is_last`` (always: one bucket per step) and ``set_buffer`` -- because the runtime
has no DDP reducer. The scalars of the step (compute times, loss, flags) travel in a separate
exact all-reduce, so compression never touches the balancer's measurements.

Error feedback state (PowerSGD's error, step count and factors, 3LC's residual) lives in the
exchange object of each rank for the whole run and goes into the run's checkpoint
(:func:`gather_states` at a checkpoint, :func:`restore_state` on resume): a run resumed at the
same world size continues bit-identically. At another world size (a resize) the per-rank state
does not apply and the resumed run starts with zero error feedback, saying so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from tessera.errors import SpecError
from tessera.perf.compression import (
    Collective,
    CompressionSpec,
    max_matrix_rank,
    wire_collectives,
)
from tessera.train import threelc
from tessera.train.examples import build_model, get_example
from tessera.train.powersgd import PowerSgd

BACKEND_SCHEMES: dict[str, frozenset[str]] = {
    # torch 2.13's gloo all-reduces fp16 and bf16 tensors (checked), and all-gathers bytes.
    "gloo": frozenset({"none", "fp16", "bf16", "powersgd", "3lc"}),
    "nccl": frozenset({"none", "fp16", "bf16", "powersgd", "3lc"}),
}
"""Which schemes each process-group backend can run."""
NCCL_BF16_MIN = (2, 10, 0)
"""NCCL reduces bfloat16 from 2.10 on."""


def check_compression(spec: CompressionSpec, shapes: Sequence[Sequence[int]], backend: str,
                      nccl_version: tuple[int, ...] | None = None) -> None:
    """Reject a scheme the model or the backend cannot run, before any rank starts.

    Args:
        spec: the parsed ``--compress`` value.
        shapes: the model's gradient shapes.
        backend: ``gloo`` (emulated ranks) or ``nccl`` (GPUs).
        nccl_version: NCCL's version when the backend is ``nccl`` (``None``: not checked).

    Raises:
        SpecError: a PowerSGD rank above every gradient matrix's rank (PyTorch would silently
            clamp it per matrix: the user asked for something the model does not have), a
            backend that does not run the scheme, or bf16 on an NCCL older than 2.10.
    """
    if spec.scheme == "powersgd":
        largest = max_matrix_rank(shapes)
        if largest == 0:
            raise SpecError("powersgd needs gradient matrices; the model has only vectors")
        if spec.rank > largest:
            raise SpecError(f"powersgd rank {spec.rank} is above the rank of every gradient "
                            f"matrix of the model (the largest has rank {largest}); choose "
                            f"1..{largest}")
    supported = BACKEND_SCHEMES.get(backend)
    if supported is None or spec.scheme not in supported:
        raise SpecError(f"--compress {spec.scheme} is not supported on the {backend} backend "
                        f"(supported: {', '.join(sorted(supported or ()))  or 'none'})")
    if (spec.scheme == "bf16" and backend == "nccl" and nccl_version is not None
            and tuple(nccl_version) < NCCL_BF16_MIN):
        found = ".".join(map(str, nccl_version))
        raise SpecError(f"--compress bf16 needs NCCL ≥ 2.10 for bfloat16 all-reduce; this "
                        f"torch has NCCL {found} (use fp16)")


class FlatBucket:
    """The part of ``torch.distributed.GradBucket`` the PyTorch hooks use, over one flat
    buffer (see the module docstring)."""

    def __init__(self, buffer: torch.Tensor, shapes: Sequence[torch.Size]) -> None:
        self._buffer = buffer
        self._shapes = list(shapes)

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def set_buffer(self, tensor: torch.Tensor) -> None:
        self._buffer = tensor

    def gradients(self) -> list[torch.Tensor]:
        out, offset = [], 0
        for shape in self._shapes:
            n = math.prod(shape)
            out.append(self._buffer[offset:offset + n].view(shape))
            offset += n
        return out

    def index(self) -> int:
        return 0

    def is_last(self) -> bool:
        return True


class GradientExchange(Protocol):
    """Sums the ranks' weighted flat gradients, compressed."""

    def reduce(self, weighted: torch.Tensor, world_size: int
               ) -> tuple[torch.Tensor, tuple[Collective, ...]]:
        """The sum over ranks of ``weighted`` (approximately), and the collectives it ran
        with the bytes this rank sent."""
        ...


class CastExchange:
    """fp16 / bf16 all-reduce through PyTorch's compress hooks."""

    def __init__(self, spec: CompressionSpec, shapes: Sequence[torch.Size]) -> None:
        self.spec = spec
        self.shapes = list(shapes)
        self.hook = (default_hooks.fp16_compress_hook if spec.scheme == "fp16"
                     else default_hooks.bf16_compress_hook)

    def reduce(self, weighted: torch.Tensor, world_size: int
               ) -> tuple[torch.Tensor, tuple[Collective, ...]]:
        if world_size <= 1:
            return weighted, ()
        bucket = FlatBucket(weighted * world_size, self.shapes)
        out = self.hook(None, bucket).wait()  # type: ignore[arg-type]
        return out, wire_collectives(self.spec, self.shapes, weighted.element_size())


class PowerSgdExchange:
    """PowerSGD (:mod:`tessera.train.powersgd`, the algorithm of PyTorch's hook with faster
    products), its state (error feedback, warm start) kept across steps and checkpointed."""

    def __init__(self, spec: CompressionSpec, shapes: Sequence[torch.Size]) -> None:
        self.spec = spec
        self.shapes = list(shapes)
        self.state = PowerSgd(self.shapes, spec.rank, spec.start_step)

    def reduce(self, weighted: torch.Tensor, world_size: int
               ) -> tuple[torch.Tensor, tuple[Collective, ...]]:
        """The weighted sum over ranks; ``weighted`` is consumed (scaled in place)."""
        if world_size <= 1:
            return weighted, ()
        compressed = self.state.compressing
        out = self.state.reduce_mean(weighted.mul_(world_size), world_size)
        return out, wire_collectives(self.spec, self.shapes, weighted.element_size(),
                                     compressed_step=compressed)

    def state_dict(self) -> dict[str, Any]:
        """This rank's error feedback and warm-start state, for the run's checkpoint."""
        return {"scheme": str(self.spec), **self.state.state_dict()}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        """Restore :meth:`state_dict`."""
        self.state.load_state_dict(state, device)


class ThreeLcExchange:
    """3LC with error feedback; the messages are all-gathered and every rank sums them.

    The residual, the values sent and the decoder's scratch are buffers of the gradient's size
    kept across steps: allocating them anew each step cost more than the arithmetic (fresh
    pages are zero-filled by the kernel on first touch).
    """

    def __init__(self, spec: CompressionSpec, shapes: Sequence[torch.Size]) -> None:
        self.spec = spec
        self.sizes = [math.prod(s) for s in shapes]
        self.residual: torch.Tensor | None = None
        self._sent: torch.Tensor | None = None
        self._ints = torch.empty(0, dtype=torch.int8)
        self._scratch: torch.Tensor | None = None

    def encode(self, weighted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's message (scales, lengths, payloads as bytes) and the flat values it
        stands for (a buffer of this object's, valid until the next call); the residual keeps
        the difference for the next step."""
        if self.residual is None:
            self.residual = torch.zeros_like(weighted)
        acc = self.residual.add_(weighted)  # a = g + e, in place: e = a − q·M below
        if self._sent is None or self._sent.shape != acc.shape or self._sent.dtype != acc.dtype:
            self._sent = torch.empty_like(acc)
            self._ints = torch.empty(acc.numel(), dtype=torch.int8, device=acc.device)
        sent = self._sent
        scales, lengths, payloads = [], [], []
        offset = 0
        for n in self.sizes:
            part = sent[offset:offset + n]
            trits, scale = threelc.quantize(acc[offset:offset + n], self.spec.sparsity,
                                            out=part, scratch=self._ints)
            payload = threelc.zre_encode(threelc.quartic_encode(trits))
            part.mul_(scale)  # the trits become the values they stand for: q·M
            scales.append(scale)
            lengths.append(payload.numel())
            payloads.append(payload)
            offset += n
        acc.sub_(sent)
        self.residual = acc
        header = torch.cat([torch.tensor(scales, dtype=torch.float32).view(torch.uint8),
                            torch.tensor(lengths, dtype=torch.int32).view(torch.uint8)]
                           ).to(acc.device)
        return torch.cat([header, *payloads]), sent

    def decode_into(self, total: torch.Tensor, message: torch.Tensor) -> torch.Tensor:
        """Add the flat values one rank's message stands for to ``total``; return it."""
        k = len(self.sizes)
        scales = message[:4 * k].clone().view(torch.float32).tolist()
        lengths = message[4 * k:8 * k].clone().view(torch.int32).tolist()
        longest = -(-max(self.sizes, default=0) // threelc.TRITS_PER_BYTE)
        need = longest * threelc.TRITS_PER_BYTE
        if (self._scratch is None or self._scratch.numel() < need
                or self._scratch.dtype != total.dtype or self._scratch.device != total.device):
            self._scratch = torch.empty(need, dtype=total.dtype, device=total.device)
        offset, pos = 8 * k, 0
        for n, scale, length in zip(self.sizes, scales, lengths, strict=True):
            packed = threelc.zre_decode(message[offset:offset + length])
            trits = threelc.quartic_decode(
                packed, n, total.dtype,
                out=self._scratch[:packed.numel() * threelc.TRITS_PER_BYTE])
            total[pos:pos + n].add_(trits, alpha=scale)
            offset, pos = offset + length, pos + n
        return total

    def decode(self, message: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The flat values one rank's message stands for."""
        return self.decode_into(torch.zeros(sum(self.sizes), dtype=dtype, device=message.device),
                                message)

    def state_dict(self) -> dict[str, Any]:
        """This rank's residual, for the run's checkpoint."""
        return {"scheme": str(self.spec),
                "residual": None if self.residual is None else self.residual.detach().cpu().clone()}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        """Restore :meth:`state_dict`."""
        residual = state["residual"]
        self.residual = None if residual is None else residual.to(device).clone()

    def reduce(self, weighted: torch.Tensor, world_size: int
               ) -> tuple[torch.Tensor, tuple[Collective, ...]]:
        if world_size <= 1:  # nothing to send: no quantisation error either
            return weighted, ()
        message, sent = self.encode(weighted)
        device = weighted.device  # NCCL gathers CUDA tensors, gloo CPU ones
        size = torch.tensor([message.numel()], dtype=torch.int64, device=device)
        sizes = [torch.zeros_like(size) for _ in range(world_size)]
        dist.all_gather(sizes, size)
        longest = max(int(s) for s in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8, device=device)
        padded[:message.numel()] = message
        gathered = [torch.empty_like(padded) for _ in range(world_size)]
        dist.all_gather(gathered, padded)
        total = sent  # this rank's own part, already decoded; the others' added to it
        me = dist.get_rank()
        for r, (msg, n) in enumerate(zip(gathered, sizes, strict=True)):
            if r != me:
                self.decode_into(total, msg[:int(n)])
        mean_bytes = sum(int(s) for s in sizes) / world_size
        return total, (Collective("allgather", 8.0), Collective("allgather", mean_bytes))


def make_exchange(spec: CompressionSpec, shapes: Sequence[torch.Size]
                  ) -> GradientExchange | None:
    """The exchange for ``spec`` (``None`` for ``none``: the runtime's plain all-reduce)."""
    if spec.scheme == "none":
        return None
    if spec.scheme in ("fp16", "bf16"):
        return CastExchange(spec, shapes)
    if spec.scheme == "powersgd":
        return PowerSgdExchange(spec, shapes)
    return ThreeLcExchange(spec, shapes)


def gather_states(exchange: GradientExchange | None, world_size: int
                  ) -> list[dict[str, Any]] | None:
    """Every rank's error-feedback state, in rank order, on rank 0 (``None`` elsewhere, and
    for schemes that keep none). A collective when the scheme keeps state: every rank calls it
    at the same step (the checkpoint steps are the same on all ranks)."""
    if not isinstance(exchange, (PowerSgdExchange, ThreeLcExchange)):
        return None
    mine = exchange.state_dict()
    if world_size <= 1:
        return [mine]
    rank = dist.get_rank()
    states: list[Any] | None = [None] * world_size if rank == 0 else None
    dist.gather_object(mine, states, dst=0)
    return states


def restore_state(exchange: GradientExchange | None, states: list[dict[str, Any]] | None,
                  rank: int, world_size: int, device: torch.device) -> str | None:
    """Give this rank its error-feedback state back from a checkpoint.

    Returns:
        ``None`` when restored (or nothing to restore), else why the run starts with zero
        error feedback: the checkpoint has none (an older one, or another scheme), or was
        written at another world size (the state is per rank).
    """
    if not isinstance(exchange, (PowerSgdExchange, ThreeLcExchange)):
        return None
    if states is None:
        return "the checkpoint holds no compression state"
    if len(states) != world_size:
        return (f"the compression state is per rank and the checkpoint has {len(states)} "
                f"ranks, this run {world_size}")
    mine = states[rank]
    if mine.get("scheme") != str(exchange.spec):
        return f"the checkpoint's compression state is for {mine.get('scheme')}"
    exchange.load_state_dict(mine, device)
    return None


def exchange_flat(weighted: torch.Tensor, extras: torch.Tensor,
                  exchange: GradientExchange | None, world_size: int
                  ) -> tuple[torch.Tensor, torch.Tensor, tuple[Collective, ...]]:
    """Sum the weighted gradient and the step's scalars over the ranks.

    Without compression both travel in one exact SUM all-reduce (the runtime's original path);
    with it, the gradient goes through ``exchange`` and the scalars through a small exact one.

    Returns:
        (summed gradient, summed scalars, the collectives with this rank's bytes).
    """
    if exchange is None:
        buffer = torch.cat([weighted, extras])
        if world_size <= 1:
            return buffer[:weighted.numel()], buffer[weighted.numel():], ()
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
        plain: tuple[Collective, ...] = (
            Collective("allreduce", buffer.numel() * buffer.element_size()),)
        return buffer[:weighted.numel()], buffer[weighted.numel():], plain
    summed, wire = exchange.reduce(weighted, world_size)
    if world_size > 1:
        dist.all_reduce(extras, op=dist.ReduceOp.SUM)
        wire += (Collective("allreduce", extras.numel() * extras.element_size()),)
    return summed, extras, wire


def sent_bytes(wire: Sequence[Collective]) -> float:
    """Bytes this rank put on the wire for ``wire`` (an all-reduce of S bytes counts S)."""
    return float(sum(c.bytes_per_rank for c in wire))


def describe(spec: CompressionSpec, shapes: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Bytes per step of ``spec`` for these shapes against fp32 (for the CLI's header)."""
    plain = sent_bytes(wire_collectives(CompressionSpec(), shapes))
    sent = sent_bytes(wire_collectives(spec, shapes))
    return {"scheme": str(spec), "bytes_per_step": sent, "fp32_bytes_per_step": plain,
            "ratio": plain / sent if sent else math.inf}


def gradient_shapes(example: str) -> list[torch.Size]:
    """The gradient shapes of a built-in example's model (built on CPU, fp32)."""
    model = build_model(get_example(example), seed=0, dtype=torch.float32)
    return [p.shape for p in model.parameters() if p.requires_grad]
