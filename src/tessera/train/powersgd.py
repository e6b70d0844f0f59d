"""PowerSGD over one flat gradient buffer (Vogels, Karimireddy and Jaggi, NeurIPS'19), ours.

The runtime used to call PyTorch's ``powerSGD_hook``. It computes the right thing, but on this
machine's CPU one of its three matrix products is slow: it forms ``Q = Mᵀ P`` as a product with
a *transposed* ``n × m`` operand and a narrow ``m × r`` result, which MKL runs as a strided pass
(22 ms for a 2048 × 2048 matrix at rank 4 on one thread, against 1.5 ms for the same numbers as
``(Pᵀ M)ᵀ``). This module is the same algorithm with the products laid out for row-major
memory, and with its buffers kept across steps instead of allocated every step.

One step, for a rank whose flat buffer holds ``N · (b_i/B) · ḡ_i`` (see
:mod:`tessera.train.compression`); the result is the *mean* over the N ranks, like the hook's:

1. Plain steps first: for the first ``start_step`` steps the buffer is all-reduced and divided
   by N (no compression, no error feedback yet).
2. Error feedback: ``M ← M + e`` (``e``, this rank's error, starts at zero).
3. Vectors, and matrices for which ``r (n + m) · 2 ≥ n m`` (compressing would not pay 2×, the
   hook's rule), are all-reduced exactly in one collective and divided by N.
4. Each other gradient, viewed as an ``n × m`` matrix ``M`` (first dimension × the rest), gets
   ``P = M Q`` with the ``m × r`` factor ``Q`` of the previous step (warm start; the first
   compressed step draws ``Q`` from a normal distribution with a fixed seed, the same on every
   rank and the same as the hook's), re-orthogonalised. All ``P`` go in one SUM all-reduce;
   each is orthogonalised (QR; the hook uses Gram-Schmidt at ``r ≤ 2``, which can differ in
   the sign of a column -- ``P Qᵀ`` does not);
   ``Q = Mᵀ P`` (computed as ``(Pᵀ M)ᵀ``) go in a second SUM all-reduce and are divided by N;
   the rank's matrix becomes ``P Qᵀ``, the same on every rank.
5. ``e ← (M + e) − result``: what this rank failed to send this step, sent with the next.

``Q`` is kept transposed (``r × m``, row-major) so the two products and the decompression
``P Qᵀ`` are all row-major passes. Rounding differs from the hook's in the last bits only (the
sums run in another order); ``tests/train/test_compress_powersgd.py`` checks the two agree.
The state a resumed run needs -- the step count, the error and the ``Q`` factors -- is
:meth:`PowerSgd.state_dict`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

MIN_COMPRESSION_RATE = 2.0
"""Compress a matrix only if its factors are at most half its size (PyTorch's default)."""
Q_SEED = 209_652_396
"""Seed of the first ``Q`` factors, identical on every rank so their ``P`` can be summed: the
seed PyTorch's hook draws with its default ``random_seed`` 0
(``numpy.random.RandomState(0).randint(10**9)``), so both start from the same factors."""


@dataclass(frozen=True, slots=True)
class _Matrix:
    """One compressed gradient: its place in the flat buffer and its factors' places."""

    offset: int
    n: int
    m: int
    r: int
    p_offset: int
    q_offset: int


def compresses(n: int, m: int, rank: int) -> bool:
    """Whether an ``n × m`` matrix is compressed at ``min(n, m, rank)`` (it must pay 2×)."""
    r = min(n, m, rank)
    return (n + m) * r * MIN_COMPRESSION_RATE < n * m


class PowerSgd:
    """PowerSGD's state for one rank: the step count, the error and the ``Q`` factors.

    Args:
        shapes: the gradient tensors' shapes, in the flat buffer's order.
        rank: the matrix approximation rank ``r`` (clamped to each matrix's ``min(n, m)``).
        start_step: how many plain (exact) all-reduces run first.
    """

    def __init__(self, shapes: Sequence[Sequence[int]], rank: int, start_step: int) -> None:
        self.rank = rank
        self.start_step = start_step
        self.iter = 0
        self.matrices: list[_Matrix] = []
        self.plain: list[tuple[int, int]] = []  # (offset, numel) of the exactly summed ones
        offset = p_size = q_size = 0
        for shape in shapes:
            numel = math.prod(shape)
            n = int(shape[0]) if len(shape) else 1
            m = numel // n if n else 0
            if len(shape) >= 2 and compresses(n, m, rank):
                r = min(n, m, rank)
                self.matrices.append(_Matrix(offset, n, m, r, p_size, q_size))
                p_size, q_size = p_size + n * r, q_size + m * r
            else:
                self.plain.append((offset, numel))
            offset += numel
        self.numel = offset
        self.p_numel, self.q_numel = p_size, q_size
        self.error: torch.Tensor | None = None
        self.q: torch.Tensor | None = None  # every Qᵀ (r × m), flat
        self._p: torch.Tensor | None = None

    @property
    def compressing(self) -> bool:
        """Whether the next step is compressed (the plain steps are over)."""
        return self.iter >= self.start_step

    def reduce_mean(self, buffer: torch.Tensor, world_size: int) -> torch.Tensor:
        """The mean over the ranks of ``buffer`` (approximately once compressing); ``buffer``
        is overwritten with it and returned. A collective: every rank calls it each step."""
        if not self.compressing:
            dist.all_reduce(buffer)
            self.iter += 1
            return buffer.div_(world_size)
        if self.error is None:
            self.error = torch.zeros_like(buffer)
        buffer.add_(self.error)
        self.error.copy_(buffer)  # M + e, before the exchange overwrites the buffer
        plain = torch.cat([buffer[o:o + k] for o, k in self.plain]) if self.plain \
            else buffer.new_zeros(0)
        dist.all_reduce(plain)
        plain.div_(world_size)
        pos = 0
        for o, k in self.plain:
            buffer[o:o + k].copy_(plain[pos:pos + k])
            pos += k
        if self.matrices:
            self._low_rank(buffer, world_size)
        self.error.sub_(buffer)
        self.iter += 1
        return buffer

    def _low_rank(self, buffer: torch.Tensor, world_size: int) -> None:
        """Step 4 of the module docstring, in place on ``buffer``."""
        if self.q is None:
            self.q = self._initial_q(buffer)
        else:
            for mat in self.matrices:
                _orthogonalize(self._qt(mat).t())
        if self._p is None:
            self._p = buffer.new_empty(self.p_numel)
        for mat in self.matrices:
            torch.mm(self._m(buffer, mat), self._qt(mat).t(), out=self._pm(mat))
        dist.all_reduce(self._p)
        for mat in self.matrices:
            p = self._pm(mat)
            _orthogonalize(p)
            torch.mm(p.t(), self._m(buffer, mat), out=self._qt(mat))  # Qᵀ = Pᵀ M
        dist.all_reduce(self.q)
        self.q.div_(world_size)
        for mat in self.matrices:
            torch.mm(self._pm(mat), self._qt(mat), out=self._m(buffer, mat))

    def _initial_q(self, buffer: torch.Tensor) -> torch.Tensor:
        """The first ``Q`` factors, orthogonalised: PyTorch's hook's draws, so that both
        start alike (one generator seeded :data:`Q_SEED`, one ``m × r`` normal draw per
        matrix in order)."""
        gen = torch.Generator().manual_seed(Q_SEED)
        q = buffer.new_empty(self.q_numel)
        for mat in self.matrices:
            draw = torch.randn(mat.m, mat.r, generator=gen, dtype=buffer.dtype)
            qt = self._qt_of(q, mat)
            qt.t().copy_(draw)
            _orthogonalize(qt.t())
        return q

    def _m(self, buffer: torch.Tensor, mat: _Matrix) -> torch.Tensor:
        return buffer[mat.offset:mat.offset + mat.n * mat.m].view(mat.n, mat.m)

    def _pm(self, mat: _Matrix) -> torch.Tensor:
        assert self._p is not None
        return self._p[mat.p_offset:mat.p_offset + mat.n * mat.r].view(mat.n, mat.r)

    def _qt(self, mat: _Matrix) -> torch.Tensor:
        assert self.q is not None
        return self._qt_of(self.q, mat)

    @staticmethod
    def _qt_of(q: torch.Tensor, mat: _Matrix) -> torch.Tensor:
        return q[mat.q_offset:mat.q_offset + mat.m * mat.r].view(mat.r, mat.m)

    def wire_elements(self) -> tuple[int, int, int]:
        """Elements of the three all-reduces of a compressed step: (exact, P, Q)."""
        return sum(k for _, k in self.plain), self.p_numel, self.q_numel

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue exactly: step count, error, ``Q`` factors."""
        return {"iter": self.iter,
                "error": None if self.error is None else self.error.detach().cpu().clone(),
                "q": None if self.q is None else self.q.detach().cpu().clone()}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        """Restore :meth:`state_dict` (tensors moved to ``device``)."""
        self.iter = int(state["iter"])
        self.error = None if state["error"] is None else state["error"].to(device).clone()
        self.q = None if state["q"] is None else state["q"].to(device).clone()
        self._p = None


def _orthogonalize(matrix: torch.Tensor) -> None:
    """Replace the columns of ``matrix`` (``k × r``, ``r ≤ k``) in place by an orthonormal
    basis of their span (the ``Q`` of a reduced QR factorisation)."""
    matrix.copy_(torch.linalg.qr(matrix).Q)
