"""The coded step (``tessera train --coded``): decided by the first k of n ranks' results.

On rank ``i`` (code and partitions from :mod:`tessera.train.coded`):

1. post a receive for the step's decision from rank 0;
2. forward/backward on the samples of the rank's partitions, each weighted by its code
   coefficient over ``B`` -- one coded gradient ``c_i`` and coded loss;
3. wait out the rank's compute time (emulated, and times the straggler factor when injected),
   polling the decision: if the step is decided meanwhile, the rank *abandons* the rest;
4. send ``c_i`` to rank 0 (or, if abandoned, the same buffer flagged "abandoned");
5. apply the decided gradient with the optimizer (every rank the same).

Rank 0 computes its own share the same way and meanwhile polls the others' messages. As soon as
``k`` results are in (its own counts when its compute ends) it decodes them with
:meth:`~tessera.train.coded.GradientCode.decode_weights` into the full-batch gradient and loss,
and sends the decision to every rank. Results that arrive later are dropped. So a step lasts as
long as the k-th fastest rank, not the slowest one.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from tessera.train.coded import GradientCode, build_code, partition_ranges, rank_load
from tessera.train.p2p_step import (
    POLL_S,
    Inbox,
    LocalResult,
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

_HEADER = 5
"""Rank → 0 message: finished, compute_s, loss, overflow, stop; then the coded gradient."""
_DECISION = 3
"""0 → rank message: loss, overflow, stop; then used mask (n), compute_s (n), gradient."""


class CodedStepper:
    """Runs coded steps on one rank; :meth:`close` before leaving the process group."""

    def __init__(self, run: StepRun) -> None:
        self.run = run
        n = run.world_size
        self.code: GradientCode = build_code(n, run.cfg.code_size)
        self.numel = sum(p.numel() for p in parameters(run))
        self.dtype = dtype_of(run.cfg)
        self.group = message_group()
        self.inbox = (Inbox(n, self.numel + _HEADER, self.dtype, self.group)
                      if run.rank == 0 else None)
        self.outbox = Outbox(self.group)

    def pieces(self, rank: int) -> list[Piece]:
        """The samples ``rank`` computes this step, weighted by its code row over ``B``."""
        b = self.run.cfg.global_batch
        ranges = partition_ranges(b, self.code.n)
        row = self.code.matrix[rank]
        return [Piece(self.run.samples + ranges[j][0], ranges[j][1], row[j] / b)
                for j in self.code.support(rank)]

    def compute(self, step: int, started_s: float) -> tuple[LocalResult, Any]:
        """This rank's coded gradient, and the deadline its (slowed) compute ends at."""
        run = self.run
        grad, loss, overflow = weighted_gradient(run, self.pieces(run.rank))
        load = rank_load(self.code, run.cfg.global_batch, run.rank)
        deadline = compute_deadline(run, step, load, started_s)
        return LocalResult(grad, loss, overflow, time.perf_counter() - started_s), deadline

    def step(self, step: int, attempt: int, stop: bool) -> tuple[dict[str, Any], bool]:
        """One coded step on this rank: its log record and whether all ranks stop after it."""
        t0 = time.perf_counter()
        if self.run.rank == 0:
            decision = self._decide(step, t0, stop)
        else:
            decision = self._contribute(step, t0, stop)
        n = self.code.n
        loss, overflow, stop_all = decision[:_DECISION].tolist()
        used = [r for r in range(n) if decision[_DECISION + r] > 0.5]
        compute_s = decision[_DECISION + n:_DECISION + 2 * n].tolist()
        apply_gradient(self.run, decision[_DECISION + 2 * n:], overflow > 0.5)
        self.run.samples += self.run.cfg.global_batch
        injected = [r for r in range(n)
                    if self.run.cfg.straggler_injection.factor_at(step, r) > 1.0]
        record = step_record(
            self.run, step, attempt, t0,
            split=[rank_load(self.code, self.run.cfg.global_batch, r) for r in range(n)],
            compute_s=compute_s, loss=loss, overflow=overflow > 0.5,
            extra={"coded": {"used": used, "late": [r for r in range(n) if r not in used]},
                   "stragglers": injected})
        return record, stop_all > 0.5

    def _contribute(self, step: int, t0: float, stop: bool) -> torch.Tensor:
        n = self.code.n
        decision = torch.zeros(_DECISION + 2 * n + self.numel, dtype=self.dtype)
        incoming = Receive(decision, 0, step, self.group)
        result, deadline = self.compute(step, t0)
        finished = deadline.wait(cancel=incoming.is_completed)
        header = torch.tensor([1.0 if finished else 0.0, time.perf_counter() - t0, result.loss,
                               1.0 if result.overflow else 0.0, 1.0 if stop else 0.0],
                              dtype=self.dtype)
        payload = result.grad if finished else torch.zeros(self.numel, dtype=self.dtype)
        self.outbox.send(torch.cat([header, payload.to(self.dtype).cpu()]), dst=0, tag=step)
        incoming.wait()
        return decision

    def _decide(self, step: int, t0: float, stop: bool) -> torch.Tensor:
        assert self.inbox is not None
        n, k = self.code.n, self.code.k
        self.inbox.expect(step)
        own, deadline = self.compute(step, t0)
        results: dict[int, tuple[torch.Tensor, float, bool]] = {}
        order: list[int] = []
        read: set[int] = set()
        compute_s = [0.0] * n
        stop_any = stop
        while True:
            for src in self.inbox.arrived(step):
                if src in read:
                    continue
                read.add(src)
                msg = self.inbox.message(src, step)
                compute_s[src] = float(msg[1])
                stop_any = stop_any or bool(msg[4] > 0.5)
                if msg[0] > 0.5:
                    results[src] = (msg[_HEADER:], float(msg[2]), bool(msg[3] > 0.5))
                    order.append(src)
            if 0 not in results and deadline.done():
                results[0] = (own.grad.cpu(), own.loss, own.overflow)
                order.append(0)
                compute_s[0] = time.perf_counter() - t0
            if len(order) >= k:
                break
            time.sleep(POLL_S)
        used = order[:k]
        weights = self.code.decode_weights(used)
        grad = torch.zeros(self.numel, dtype=self.dtype)
        loss = 0.0
        overflow = False
        for r, w in zip(used, weights, strict=True):
            g, part_loss, part_overflow = results[r]
            if w != 0.0:
                grad += w * g.to(self.dtype)
                loss += w * part_loss
                overflow = overflow or part_overflow
        elapsed_s = time.perf_counter() - t0
        compute_s = [c if c > 0.0 else elapsed_s for c in compute_s]  # late: at least this
        mask = [1.0 if r in used else 0.0 for r in range(n)]
        head = torch.tensor([loss, 1.0 if overflow else 0.0, 1.0 if stop_any else 0.0, *mask,
                             *compute_s], dtype=self.dtype)
        decision = torch.cat([head, grad])
        for dst in range(1, n):
            self.outbox.send(decision, dst=dst, tag=step)
        self.inbox.forget_before(step)
        return decision

    def close(self) -> None:
        """Wait for every message still in flight (late results, decisions)."""
        if self.inbox is not None:
            self.inbox.drain()
        self.outbox.drain()

