"""Weighted gradient averaging for data parallelism with uneven per-rank batches.

The loss of one step over the global batch ``B = Σ b_i`` is the mean over all its samples::

    L = (1/B) Σ_i Σ_{x ∈ batch_i} ℓ(x)   ⇒   ∇L = Σ_i (b_i / B) · ḡ_i

where ``ḡ_i`` is rank i's gradient of its *local mean* loss. PyTorch's DistributedDataParallel
averages with weight ``1/N`` instead, which is right only when all ``b_i`` are equal; with a
heterogeneous split it would over-weight the samples of slow ranks. Here each rank scales its
flattened gradient by ``b_i/B`` and the ranks all-reduce with SUM, so one update equals the
single-process update on the concatenated batch (up to floating-point summation order).

The same all-reduce carries a few scalars per step (each rank's measured compute time in its own
slot, its weighted loss, an overflow flag, a stop flag), so step-time measurements reach every
rank without a second collective, and every rank feeds identical numbers to its balancer.

Gradients are synchronised after the whole backward pass (one flat buffer, one collective). That
gives up DDP's overlap of communication with backward, but makes the compute time of each rank
measurable without the waiting time of the all-reduce mixed in -- the quantity the balancer needs.
With tiny example models the collective is short either way.

With ``--compress`` the gradient goes through a compressed exchange instead and the scalars
through a small exact all-reduce (:mod:`tessera.train.compression`); with ``--link-gbps`` the
exchange lasts as long as on an emulated slow link (:mod:`tessera.train.links`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from tessera.train.compression import GradientExchange, exchange_flat, sent_bytes
from tessera.train.devices import Precision
from tessera.train.links import EmulatedLink


def flat_gradient(params: Sequence[nn.Parameter]) -> torch.Tensor:
    """All parameter gradients in one flat tensor (zeros where a gradient is missing)."""
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params
    ]
    return torch.cat(parts)


def write_flat_gradient(params: Sequence[nn.Parameter], flat: torch.Tensor) -> None:
    """Copy a flat tensor back into the parameters' ``.grad`` fields."""
    offset = 0
    for p in params:
        n = p.numel()
        chunk = flat[offset:offset + n].view_as(p)
        if p.grad is None:
            p.grad = chunk.clone()
        else:
            p.grad.copy_(chunk)
        offset += n


@dataclass(frozen=True, slots=True)
class StepExtras:
    """The scalars every rank learns from one synchronised step.

    Attributes:
        compute_s: each rank's compute time (forward, backward and emulation padding).
        loss: the global-batch loss (local mean losses weighted by ``b_i/B``).
        overflow: whether any rank found inf/NaN gradients (fp16 loss scaling).
        stop: whether any rank was asked to stop (SIGTERM): all ranks stop after this step.
        sent_bytes: bytes this rank put on the wire (compressed bytes with compression).
        exchange_s: how long the exchange took (emulated link included).
    """

    compute_s: tuple[float, ...]
    loss: float
    overflow: bool
    stop: bool = False
    sent_bytes: float = 0.0
    exchange_s: float = 0.0


def sync_gradients(params: Sequence[nn.Parameter], *, rank: int, world_size: int,
                   local_batch: int, global_batch: int, compute_s: float, local_loss: float,
                   overflow: bool, stop: bool = False,
                   exchange: GradientExchange | None = None,
                   link: EmulatedLink | None = None) -> StepExtras:
    """Replace local gradients by the ``b_i/B``-weighted sum over ranks; share step scalars.

    Args:
        params: the model's parameters, in the same order on every rank.
        rank / world_size: this rank and the number of ranks.
        local_batch / global_batch: ``b_i`` and ``B``.
        compute_s: this rank's compute time for the step.
        local_loss: this rank's mean loss over its ``b_i`` samples.
        overflow: this rank saw non-finite gradients.
        stop: this rank was asked to stop.
        exchange: compress the gradient (:mod:`tessera.train.compression`); ``None``: exact.
        link: make the exchange last as long as on this emulated link.

    Returns:
        The step's shared scalars, identical on every rank.
    """
    weight = local_batch / global_batch
    grad = flat_gradient(params)
    extras = torch.zeros(world_size + 3, dtype=grad.dtype, device=grad.device)
    extras[rank] = compute_s
    extras[world_size] = weight * local_loss
    extras[world_size + 1] = 1.0 if overflow else 0.0
    extras[world_size + 2] = 1.0 if stop else 0.0
    started_s = time.perf_counter()
    summed, summed_extras, wire = exchange_flat(grad * weight, extras, exchange, world_size)
    exchange_s = (link.pad(wire, world_size, started_s) if link is not None
                  else time.perf_counter() - started_s)
    write_flat_gradient(params, summed)
    tail = summed_extras.tolist()
    return StepExtras(tuple(tail[:world_size]), tail[world_size], tail[world_size + 1] > 0,
                      tail[world_size + 2] > 0, sent_bytes(wire), exchange_s)


def broadcast_parameters(module: nn.Module, src: int = 0) -> None:
    """Make every rank's parameters and buffers equal to rank ``src``'s."""
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=src)


class LossScaler:
    """Dynamic loss scaling for fp16 ranks.

    fp16 gradients underflow to zero for small values, so the loss is multiplied by ``scale``
    before backward and the gradients divided by it afterwards. An overflow anywhere (reported
    through the all-reduce) skips the step on every rank and halves the scale; after
    ``growth_interval`` clean steps the scale doubles. With ``enabled=False`` it is the identity.
    """

    def __init__(self, enabled: bool, scale: float = 2.0**15, growth_interval: int = 200) -> None:
        self.enabled = enabled
        self.scale = scale if enabled else 1.0
        self.growth_interval = growth_interval
        self._clean_steps = 0

    def unscale_and_check(self, params: Sequence[nn.Parameter]) -> bool:
        """Divide gradients by the scale; return whether any is non-finite."""
        if not self.enabled:
            return False
        overflow = False
        for p in params:
            if p.grad is not None:
                p.grad.div_(self.scale)
                overflow = overflow or not bool(torch.isfinite(p.grad).all())
        return overflow

    def update(self, overflow: bool) -> None:
        """Adjust the scale after a step (all ranks see the same ``overflow``)."""
        if not self.enabled:
            return
        if overflow:
            self.scale /= 2.0
            self._clean_steps = 0
        else:
            self._clean_steps += 1
            if self._clean_steps >= self.growth_interval:
                self.scale *= 2.0
                self._clean_steps = 0


@contextlib.contextmanager
def autocast_for(precision: Precision, device: torch.device) -> Iterator[None]:
    """Autocast forward passes to the rank's precision on GPUs; full precision on CPU.

    On CPU (emulation) all ranks compute in the configured dtype, so results stay comparable
    across ranks; the chosen precision is still reported.
    """
    if device.type != "cuda" or precision is Precision.FP32:
        yield
        return
    dtype = torch.bfloat16 if precision is Precision.BF16 else torch.float16
    with torch.autocast(device_type="cuda", dtype=dtype):
        yield
