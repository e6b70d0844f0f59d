"""Bounded staleness (``tessera train --staleness S``): the fallback where coding cannot apply.

Stale synchronous parallel (SSP; Ho et al., NIPS 2013) in the step structure of this runtime:
a step does not wait for a late rank, whose gradient is applied when it arrives -- at most ``S``
steps after the step whose parameters it was computed on. Rank 0 decides every step; all ranks
apply the same decided gradient, so parameters stay identical everywhere.

On rank ``i`` in step ``t``:

1. if the rank is idle, it computes the gradient of its slice of step ``t`` (weighted
   ``1/B`` per sample, so the contributions of all ranks add up to the full-batch gradient) on
   the current parameters; a rank still busy with an older slice keeps at it;
2. it waits out its (emulated, possibly slowed) compute while polling for rank 0's decision of
   step ``t``; when the compute ends first it sends its result, tagged with the step it was
   computed at; when the decision comes first it sends "busy" and carries the work over;
3. it applies the decided gradient.

Rank 0 decides step ``t`` when every rank has reported, or, once half of them have, when
``LATE_RATIO`` times the time the first half took has passed -- but never without a rank whose
result would otherwise be applied more than ``S`` steps after it was computed (it waits for
those). The decided gradient is the sum of the contributions in: fresh ones, and stale ones that
came in after their own step was decided. The slices of the steps a late rank skipped are not
computed (the sample stream moves on; each record says how many samples it used).

``S = 0`` is the plain synchronous step: the worker runs the ordinary all-reduce for it, so a
run with ``--staleness 0`` is bit-equal to one without the option.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from tessera.train.p2p_step import (
    POLL_S,
    Inbox,
    Outbox,
    Piece,
    Receive,
    StepRun,
    apply_gradient,
    compute_deadline,
    dtype_of,
    message_group,
    parameters,
    step_record,
    weighted_gradient,
)
from tessera.train.stragglers import Slowdown

LATE_RATIO = 1.5
"""A rank is late when it has not reported by this many times the first half's time."""
_HEADER = 7
"""Rank → 0: kind (1 result, 0 busy), from_step, loss, weight, overflow, stop, compute_s."""
_DECISION = 3
"""0 → rank: loss, overflow, stop; staleness per rank (n, −1: none), compute_s (n), gradient."""


@dataclass
class _Work:
    """A computed gradient waiting for its (slowed) compute time to pass."""

    grad: torch.Tensor
    loss: float
    weight: float
    overflow: bool
    from_step: int
    deadline: Slowdown
    started_s: float


@dataclass(frozen=True, slots=True)
class _Contribution:
    rank: int
    from_step: int
    grad: torch.Tensor
    loss: float
    weight: float
    overflow: bool


class StaleStepper:
    """Runs bounded-staleness steps on one rank; :meth:`close` before leaving the group."""

    def __init__(self, run: StepRun) -> None:
        self.run = run
        self.bound = run.cfg.staleness
        n = run.world_size
        self.numel = sum(p.numel() for p in parameters(run))
        self.dtype = dtype_of(run.cfg)
        self.group = message_group()
        self.work: _Work | None = None
        self.outbox = Outbox(self.group)
        self.inbox = (Inbox(n, self.numel + _HEADER, self.dtype, self.group)
                      if run.rank == 0 else None)
        self.since: list[int | None] = [None] * n  # rank 0: step each rank's work started at
        self.unread: set[int] = set()  # rank 0: ranks whose message of the last step is owed
        self.last_step: int | None = None

    def _start_work(self, step: int, started_s: float) -> None:
        run = self.run
        split = run.balancer.split
        b, offset = split[run.rank], sum(split[:run.rank])
        piece = Piece(run.samples + offset, b, 1.0 / run.cfg.global_batch)
        grad, loss, overflow = weighted_gradient(run, [piece])
        self.work = _Work(grad.cpu().to(self.dtype), loss, b / run.cfg.global_batch, overflow,
                          step, compute_deadline(run, step, b, started_s), started_s)

    def step(self, step: int, attempt: int, stop: bool) -> tuple[dict[str, Any], bool]:
        """One step on this rank: its log record and whether all ranks stop after it."""
        t0 = time.perf_counter()
        if self.work is None:
            self._start_work(step, t0)
        decision = (self._decide(step, t0, stop) if self.run.rank == 0
                    else self._contribute(step, stop))
        n = self.run.world_size
        loss, overflow, stop_all = decision[:_DECISION].tolist()
        staleness = [int(v) for v in decision[_DECISION:_DECISION + n].tolist()]
        compute_s = decision[_DECISION + n:_DECISION + 2 * n].tolist()
        apply_gradient(self.run, decision[_DECISION + 2 * n:], overflow > 0.5)
        self.run.samples += self.run.cfg.global_batch
        split = self.run.balancer.split
        record = step_record(
            self.run, step, attempt, t0, split=split, compute_s=compute_s, loss=loss,
            overflow=overflow > 0.5,
            extra={"staleness": staleness,
                   "samples_used": sum(split[r] for r in range(n) if staleness[r] >= 0),
                   "stragglers": [r for r in range(n)
                                  if self.run.cfg.straggler_injection.factor_at(step, r) > 1]})
        return record, stop_all > 0.5

    def _message(self, finished: bool, stop: bool) -> torch.Tensor:
        w = self.work
        assert w is not None
        header = torch.tensor([1.0 if finished else 0.0, float(w.from_step), w.loss, w.weight,
                               1.0 if w.overflow else 0.0, 1.0 if stop else 0.0,
                               time.perf_counter() - w.started_s], dtype=self.dtype)
        payload = w.grad if finished else torch.zeros(self.numel, dtype=self.dtype)
        return torch.cat([header, payload])

    def _contribute(self, step: int, stop: bool) -> torch.Tensor:
        n = self.run.world_size
        decision = torch.zeros(_DECISION + 2 * n + self.numel, dtype=self.dtype)
        incoming = Receive(decision, 0, step, self.group)
        assert self.work is not None
        finished = self.work.deadline.wait(cancel=incoming.is_completed)
        self.outbox.send(self._message(finished, stop), dst=0, tag=step)
        if finished:
            self.work = None
        incoming.wait()
        return decision

    def _read(self, src: int, msg: torch.Tensor, step: int,
              into: list[_Contribution]) -> tuple[bool, float]:
        """Take one message in; return (stop flag, compute time). A result frees the rank: its
        next work starts at the step after ``step``."""
        if msg[0] > 0.5:
            into.append(_Contribution(src, int(msg[1]), msg[_HEADER:].clone(), float(msg[2]),
                                      float(msg[3]), bool(msg[4] > 0.5)))
            self.since[src] = step + 1
        return bool(msg[5] > 0.5), float(msg[6])

    def _decide(self, step: int, t0: float, stop: bool) -> torch.Tensor:
        assert self.inbox is not None and self.work is not None
        n = self.run.world_size
        contributions: list[_Contribution] = []
        stop_any = stop
        if self.last_step is not None:  # late messages of the last step: results are stale now
            for src in sorted(self.unread):
                s, _ = self._read(src, self.inbox.wait(src, self.last_step), self.last_step,
                                  contributions)
                stop_any = stop_any or s
            self.inbox.forget_before(step)
        self.inbox.expect(step)
        self.since = [step if s is None else s for s in self.since]  # first step: all fresh
        # A rank whose result would be applied more than S steps after its work started is
        # waited for now.
        must = {r for r, s in enumerate(self.since) if s is not None and step - s >= self.bound}
        reported: set[int] = set()
        compute_s = [0.0] * n
        half_s: float | None = None
        while True:
            for src in self.inbox.arrived(step):
                if src not in reported:
                    reported.add(src)
                    s, compute_s[src] = self._read(src, self.inbox.message(src, step), step,
                                                   contributions)
                    stop_any = stop_any or s
            if 0 not in reported and self.work is not None and self.work.deadline.done():
                w = self.work
                contributions.append(_Contribution(0, w.from_step, w.grad, w.loss, w.weight,
                                                   w.overflow))
                compute_s[0] = time.perf_counter() - w.started_s
                self.since[0] = step + 1
                self.work = None
                reported.add(0)
            now_s = time.perf_counter() - t0
            if half_s is None and len(reported) >= math.ceil(n / 2):
                half_s = now_s
            if len(reported) == n:
                break
            if must <= reported and half_s is not None and now_s >= LATE_RATIO * half_s:
                break
            time.sleep(POLL_S)
        self.unread = set(range(1, n)) - reported
        self.last_step = step
        return self._decision(step, contributions, compute_s, stop_any, t0)

    def _decision(self, step: int, contributions: list[_Contribution], compute_s: list[float],
                  stop: bool, t0: float) -> torch.Tensor:
        n = self.run.world_size
        grad = torch.zeros(self.numel, dtype=self.dtype)
        staleness = [-1.0] * n
        loss = weight = 0.0
        overflow = any(c.overflow for c in contributions)
        for c in sorted(contributions, key=lambda c: (c.rank, c.from_step)):
            grad += c.grad
            loss += c.loss
            weight += c.weight
            staleness[c.rank] = float(max(staleness[c.rank], step - c.from_step))
        elapsed_s = time.perf_counter() - t0
        compute_s = [c if c > 0.0 else elapsed_s for c in compute_s]
        head = torch.tensor([loss / weight if weight > 0 else float("nan"),
                             1.0 if overflow else 0.0, 1.0 if stop else 0.0, *staleness,
                             *compute_s], dtype=self.dtype)
        decision = torch.cat([head, grad])
        for dst in range(1, n):
            self.outbox.send(decision, dst=dst, tag=step)
        return decision

    def close(self) -> None:
        """Wait for every message still in flight."""
        if self.inbox is not None:
            self.inbox.drain()
        self.outbox.drain()
