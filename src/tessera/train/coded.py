"""Gradient coding: n ranks, any k of them give the exact full-batch gradient of a step.

Tandon, Lei, Dimakis and Karampatziakis, *Gradient Coding* (ICML 2017). The step's global batch
of ``B`` samples is cut into ``n`` partitions ``P_0..P_{n-1}`` (one per rank). With
``s = n − k`` stragglers to tolerate, each rank ``i`` computes the gradients of ``s + 1``
partitions (its *support*) and sends one *coded* gradient, a linear combination::

    c_i = Σ_j E[i, j] · G_j / B          G_j = Σ_{x ∈ P_j} ∇ℓ(x)   (support of row i only)

The encoding matrix ``E`` (n × n) is built so that the all-ones vector lies in the span of *any*
``k`` of its rows: for every set ``F`` of ``k`` ranks there are decoding weights ``a`` with
``aᵀ E_F = 1ᵀ``, hence ``Σ_{i∈F} a_i c_i = (1/B) Σ_j G_j``, the full-batch gradient -- exactly,
up to floating-point rounding, whichever ``k`` ranks arrive first. The loss is linear in the same
way, so the step's global loss is decoded with the same weights.

Two constructions (both from the paper):

* **fractional repetition** when ``(s + 1)`` divides ``n``: the ranks form ``n/(s+1)`` groups
  of ``s + 1``; all ranks of group ``g`` compute the same ``s + 1`` partitions and send their
  plain sum (coefficients 1). ``k`` ranks always include one of every group (a group can lose at
  most ``s`` members), and decoding adds one result per group: weights 0 and 1.
* **cyclic MDS** otherwise: rank ``i`` holds partitions ``i, i+1, …, i+s`` (mod n). A seeded
  random ``s × n`` matrix ``H`` with ``H·1 = 0`` fixes each row: ``E[i, i] = 1`` and the other
  ``s`` coefficients solve ``H E[i]ᵀ = 0``. The rows then lie in the null space of ``H``
  (dimension ``n − s = k``, containing ``1``) and any ``k`` of them are independent (with
  probability 1; :func:`check_code` verifies every subset before a run), so they span it.

Relation to BPCC (batch-processing coded computation): BPCC gives each worker redundant, encoded
shares of a batch so that any ``k`` of ``n`` finish the job; gradient coding is that idea for a
*sum of gradients*. The "encoding" is applied to the results (the coded combination of partition
gradients) rather than to the inputs, because gradients are nonlinear in the samples; the cost
is the same replication factor ``(s + 1) = n − k + 1`` of compute per rank.

Heterogeneous speeds: the partitions are equal (``B/n`` each, remainders to the first ones).
Sizing partitions to speeds would need the ``s + 1`` partitions of each support to add up to
that rank's share, a circulant system that has no positive solution in general (and none at all
for fractional repetition, where a group shares one load); so the coded mode targets *transient*
stragglers among similar ranks, and ``--split planned`` stays the answer to *known* speed
differences. See ``docs/train.md``, section "Stragglers".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tessera.errors import SpecError

DECODE_TOL = 1e-8
"""Largest residual ``‖E_Fᵀ a − 1‖∞`` accepted when decoding (float64)."""
CODE_SEED = 20_170_806
"""Seeds the cyclic construction's random ``H`` (fixed: every rank builds the same code)."""


@dataclass(frozen=True, slots=True)
class GradientCode:
    """One gradient code: ``n`` ranks, any ``k`` decode.

    Attributes:
        n / k: ranks, and how many of them suffice.
        scheme: ``fractional-repetition`` or ``cyclic-mds``.
        matrix: the encoding matrix ``E`` as nested tuples (row i: rank i's coefficients).
    """

    n: int
    k: int
    scheme: str
    matrix: tuple[tuple[float, ...], ...]

    @property
    def stragglers(self) -> int:
        """``s = n − k``: how many ranks a step can do without."""
        return self.n - self.k

    def support(self, rank: int) -> tuple[int, ...]:
        """The partitions ``rank`` computes (non-zero coefficients of its row), in order."""
        return tuple(j for j, v in enumerate(self.matrix[rank]) if v != 0.0)

    def groups(self) -> tuple[tuple[int, ...], ...]:
        """Fractional repetition only: the ranks that compute the same partitions."""
        size = self.stragglers + 1
        return tuple(tuple(range(g * size, (g + 1) * size)) for g in range(self.n // size))

    def decode_weights(self, ranks: Sequence[int]) -> list[float]:
        """Weights ``a`` (one per entry of ``ranks``) with ``Σ a_i E[i] = 1``.

        Fractional repetition takes the first listed rank of every group (weight 1, others 0);
        the cyclic code solves the least-squares system in float64.

        Raises:
            ValueError: fewer than ``k`` distinct ranks, or (cyclic) a singular subset.
        """
        if len(set(ranks)) < self.k:
            raise ValueError(f"decoding needs {self.k} distinct ranks, got {list(ranks)}")
        if self.scheme == "fractional-repetition":
            size = self.stragglers + 1
            seen: set[int] = set()
            weights = []
            for r in ranks:
                weights.append(0.0 if r // size in seen else 1.0)
                seen.add(r // size)
            if len(seen) != self.n // size:
                raise ValueError(f"ranks {list(ranks)} miss a whole group")
            return weights
        e = torch.tensor([self.matrix[r] for r in ranks], dtype=torch.float64)
        ones = torch.ones(self.n, 1, dtype=torch.float64)
        a = torch.linalg.lstsq(e.T, ones).solution
        residual = float((e.T @ a - ones).abs().max())
        if residual > DECODE_TOL:
            raise ValueError(f"ranks {list(ranks)} do not decode (residual {residual:.2e})")
        return [float(v) for v in a.reshape(-1)]


def build_code(n: int, k: int) -> GradientCode:
    """The code for ``n`` ranks of which any ``k`` suffice (fractional repetition if it fits).

    Raises:
        SpecError: ``k`` outside ``[1, n]`` or ``n < 2``.
    """
    if n < 2 or not 1 <= k <= n:
        raise SpecError(f"a gradient code needs n ≥ 2 and 1 ≤ k ≤ n, got n = {n}, k = {k}")
    s = n - k
    if n % (s + 1) == 0:
        rows = [[1.0 if j // (s + 1) == i // (s + 1) else 0.0 for j in range(n)]
                for i in range(n)]
        return GradientCode(n, k, "fractional-repetition", tuple(tuple(r) for r in rows))
    gen = torch.Generator().manual_seed(CODE_SEED + 1000 * n + k)
    h = torch.randn(s, n, generator=gen, dtype=torch.float64)
    h[:, n - 1] = -h[:, : n - 1].sum(dim=1)  # H·1 = 0, so 1 is in the null space
    rows = []
    for i in range(n):
        others = [(i + d) % n for d in range(1, s + 1)]
        x = torch.linalg.solve(h[:, others], -h[:, i : i + 1]).reshape(-1)
        row = [0.0] * n
        row[i] = 1.0
        for j, v in zip(others, x.tolist(), strict=True):
            row[j] = v
        rows.append(row)
    return GradientCode(n, k, "cyclic-mds", tuple(tuple(r) for r in rows))


def check_code(code: GradientCode) -> None:
    """Decode every subset of ``k`` ranks once (C(n, k) ≤ 70 for n ≤ 8); raise if one fails."""
    for subset in itertools.combinations(range(code.n), code.k):
        code.decode_weights(subset)


def partition_sizes(global_batch: int, n: int) -> tuple[int, ...]:
    """``n`` partitions of the step's batch, as equal as possible (larger ones first)."""
    base, extra = divmod(global_batch, n)
    return tuple(base + (1 if j < extra else 0) for j in range(n))


def partition_ranges(global_batch: int, n: int) -> tuple[tuple[int, int], ...]:
    """``(offset, count)`` of each partition inside the step's batch."""
    sizes = partition_sizes(global_batch, n)
    return tuple((sum(sizes[:j]), sizes[j]) for j in range(n))


def rank_load(code: GradientCode, global_batch: int, rank: int) -> int:
    """Samples ``rank`` computes per step: the sizes of its support's partitions."""
    sizes = partition_sizes(global_batch, code.n)
    return sum(sizes[j] for j in code.support(rank))
