"""The pieces shared by steps that do not wait for every rank (coded and bounded-staleness).

A synchronous step ends in an all-reduce, a collective every rank must enter, so the slowest rank
sets the pace. The straggler-tolerant steps replace it by point-to-point messages over the same
process group: every rank sends its result to rank 0 (``isend``, tagged with the step), rank 0
polls the arrivals (``irecv(...).is_completed()``), decides the step as soon as it has enough,
and sends the decided gradient back to every rank, which all apply it with the same optimizer
step -- the parameters stay identical on every rank, as with the all-reduce. Rank 0 also
computes a share; its own result "arrives" when its (possibly slowed) compute ends.

Every message a rank owes is always sent (a rank that gave up sends a short "abandoned" flag in
the same buffer), so no receive is left pending when the process group closes; the late ones are
drained without blocking a later step (:class:`Inbox`).

This module holds the per-rank state those steps read (:class:`StepRun`, which the worker's
``_Run`` satisfies), the weighted forward/backward over sample ranges, the straggler-aware
compute deadline and the inbox. :mod:`tessera.train.coded_step` and
:mod:`tessera.train.staleness` build their steps from them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from tessera.train.balancer import OnlineBalancer
from tessera.train.config import TrainConfig
from tessera.train.ddp import LossScaler, autocast_for, flat_gradient, write_flat_gradient
from tessera.train.devices import Precision
from tessera.train.emulation import Emulator
from tessera.train.examples import Example, loss_fn, sample_range
from tessera.train.stragglers import Slowdown

POLL_S = 0.0005
"""How often rank 0 looks at its inbox while deciding a step."""


class StepRun(Protocol):
    """What a step reads and updates on one rank (the worker's ``_Run`` has these)."""

    cfg: TrainConfig
    rank: int
    world_size: int
    device: torch.device
    precision: Precision
    example: Example
    model: nn.Module
    optimizer: torch.optim.Optimizer
    balancer: OnlineBalancer
    scaler: LossScaler
    emulator: Emulator | None
    samples: int


@dataclass(frozen=True, slots=True)
class Piece:
    """Samples ``[start, start + count)`` of the stream, each weighted ``weight`` in the loss."""

    start: int
    count: int
    weight: float


@dataclass(frozen=True, slots=True)
class LocalResult:
    """One rank's weighted gradient and loss for some pieces, and the time it took."""

    grad: torch.Tensor
    loss: float
    overflow: bool
    compute_s: float


def dtype_of(cfg: TrainConfig) -> torch.dtype:
    """The parameter dtype of a run (``float64`` for exactness tests)."""
    return torch.float64 if cfg.dtype == "float64" else torch.float32


def parameters(run: StepRun) -> list[nn.Parameter]:
    """The trained parameters, in the same order on every rank."""
    return [p for p in run.model.parameters() if p.requires_grad]


def weighted_gradient(run: StepRun, pieces: Sequence[Piece]) -> tuple[torch.Tensor, float, bool]:
    """Gradient of ``Σ_pieces weight · Σ_{x ∈ piece} ℓ(x)`` (one forward, one backward).

    Returns:
        The flat gradient, the weighted loss, and whether an fp16 rank overflowed.
    """
    dtype = dtype_of(run.cfg)
    parts = [sample_range(run.example, run.cfg.seed, p.start, p.count, dtype) for p in pieces]
    x = torch.cat([a for a, _ in parts]).to(run.device)
    y = torch.cat([b for _, b in parts]).to(run.device)
    run.optimizer.zero_grad(set_to_none=True)
    with autocast_for(run.precision, run.device):
        logits = run.model(x)
        offset = 0
        total: torch.Tensor | None = None
        for p in pieces:
            term = loss_fn(logits[offset:offset + p.count], y[offset:offset + p.count]) \
                * (p.count * p.weight)
            total = term if total is None else total + term
            offset += p.count
    assert total is not None
    (total * run.scaler.scale).backward()
    params = parameters(run)
    overflow = run.scaler.unscale_and_check(params)
    return flat_gradient(params).detach().clone(), float(total.detach()), overflow


def compute_deadline(run: StepRun, step: int, batch: int, started_s: float) -> Slowdown:
    """When this rank's compute of ``batch`` samples in ``step`` is over, stragglers included.

    Emulated: the nominal time of the batch on the rank's device; real: the measured compute.
    Either is multiplied by the straggler factor when the rank straggles in this step.
    """
    factor = run.cfg.straggler_injection.factor_at(step, run.rank)
    if run.emulator is not None:
        nominal_s = run.emulator.nominal_step_s(step, run.rank, batch)
        return Slowdown(started_s + factor * nominal_s)
    torch.cuda.synchronize(run.device)
    return Slowdown.after_compute(started_s, time.perf_counter() - started_s, factor)


def apply_gradient(run: StepRun, grad: torch.Tensor, overflow: bool) -> None:
    """Write the decided gradient into ``.grad`` and take the optimizer step (same everywhere)."""
    write_flat_gradient(parameters(run), grad.to(run.device))
    if not overflow:
        run.optimizer.step()
    run.scaler.update(overflow)


def message_group() -> Any:
    """The process group for step messages: the default one over gloo; over NCCL a gloo group
    of the same ranks (messages are CPU tensors, and gloo's tags keep steps apart). Every rank
    must call this, at the same point (``new_group`` is collective)."""
    if dist.get_backend() == "gloo":
        return None
    return dist.new_group(backend="gloo")


class Receive:
    """An ``irecv`` that can be polled.

    Gloo's receive work reports ``is_completed()`` only after ``wait()`` returned, so a
    daemon thread waits (``wait`` releases the GIL) and sets an event; :meth:`is_completed`
    reads the event. An error in the wait (the process group's timeout) is raised by
    :meth:`wait`.
    """

    def __init__(self, buf: torch.Tensor, src: int, tag: int, group: Any = None) -> None:
        self.buf = buf
        work = dist.irecv(buf, src=src, tag=tag, group=group)
        assert work is not None  # None only for ranks outside the group
        self._work = work
        self._done = threading.Event()
        self._error: BaseException | None = None
        threading.Thread(target=self._wait, daemon=True, name=f"recv-{src}-{tag}").start()

    def _wait(self) -> None:
        try:
            self._work.wait()
        except BaseException as e:  # re-raised by wait() in the rank's own thread
            self._error = e
        self._done.set()

    def is_completed(self) -> bool:
        """Whether the message is in (never blocks)."""
        return self._done.is_set()

    def wait(self) -> torch.Tensor:
        """Block until the message is in; return the buffer."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self.buf


class Inbox:
    """Rank 0's receives from every other rank, one buffer per (rank, step), polled.

    ``expect(step)`` posts an ``irecv`` from every other rank for ``step``; ``arrived(step)``
    lists the ranks whose message is in (in the order they were first seen); ``message`` reads
    one. Receives of past steps stay posted until their message comes (a late rank always
    sends) and are dropped then; :meth:`drain` waits for all of them (end of the run).
    """

    def __init__(self, world_size: int, size: int, dtype: torch.dtype, group: Any = None
                 ) -> None:
        self.group = group
        self.world_size = world_size
        self.size = size
        self.dtype = dtype
        self._works: dict[tuple[int, int], Receive] = {}
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}
        self._seen: dict[int, list[int]] = {}

    def expect(self, step: int) -> None:
        """Post this step's receives."""
        self._seen[step] = []
        for src in range(1, self.world_size):
            buf = torch.zeros(self.size, dtype=self.dtype)
            self._buffers[(src, step)] = buf
            self._works[(src, step)] = Receive(buf, src, step, self.group)

    def arrived(self, step: int) -> list[int]:
        """The ranks whose ``step`` message has arrived, in arrival order (as polled)."""
        seen = self._seen[step]
        for src in range(1, self.world_size):
            work = self._works.get((src, step))
            if src not in seen and work is not None and work.is_completed():
                seen.append(src)
        return list(seen)

    def message(self, src: int, step: int) -> torch.Tensor:
        """The message ``src`` sent for ``step`` (after :meth:`arrived` listed it)."""
        return self._buffers[(src, step)]

    def wait(self, src: int, step: int) -> torch.Tensor:
        """Block until ``src``'s message for ``step`` is in; return it."""
        self._works[(src, step)].wait()
        if src not in self._seen[step]:
            self._seen[step].append(src)
        return self._buffers[(src, step)]

    def forget_before(self, step: int) -> None:
        """Drop the buffers of steps before ``step`` whose messages have arrived (late ones
        stay posted until their rank sends)."""
        for key in [k for k, w in self._works.items() if k[1] < step and w.is_completed()]:
            del self._works[key], self._buffers[key]
        live = {s for _, s in self._works}
        for s in [s for s in self._seen if s < step and s not in live]:
            del self._seen[s]

    def drain(self) -> None:
        """Wait for every message still owed (they all come: a late rank sends an abandon)."""
        for work in list(self._works.values()):
            work.wait()
        self._works.clear()
        self._buffers.clear()
        self._seen.clear()


class Outbox:
    """A rank's pending sends; each buffer is kept alive until its send completes.

    Sends are tagged with their step. A send of two steps ago has surely been matched (its
    receiver posted the receive before answering the step in between), so :meth:`send` waits
    for those first, which keeps the list short without blocking.
    """

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self._pending: list[tuple[Any, torch.Tensor, int]] = []

    def send(self, buf: torch.Tensor, dst: int, tag: int) -> None:
        """Send ``buf`` to ``dst`` without waiting for it to be received."""
        for work, _, old in self._pending:
            if old <= tag - 2:
                work.wait()
        self._pending = [p for p in self._pending if p[2] > tag - 2]
        self._pending.append((dist.isend(buf, dst=dst, tag=tag, group=self.group), buf, tag))

    def drain(self) -> None:
        """Wait until every send has been received."""
        for work, _, _ in self._pending:
            work.wait()
        self._pending.clear()


def step_record(run: StepRun, step: int, attempt: int, started_s: float, *,
                split: Sequence[int],
                compute_s: Sequence[float], loss: float, overflow: bool,
                extra: dict[str, Any]) -> dict[str, Any]:
    """The step's log record, with the fields of a synchronous step's record plus ``extra``."""
    record: dict[str, Any] = {
        "step": step, "split": list(split), "compute_s": list(compute_s), "loss": loss,
        "skipped": overflow, "attempt": attempt, "rebalance": None,
        "global_batch": run.cfg.global_batch, "lr": run.optimizer.param_groups[0]["lr"],
        "resize": None, **extra,
    }
    record["wall_s"] = time.perf_counter() - started_s
    record["end_s"] = time.time()
    return record
