"""Gavel's round mechanism: from time shares to "who runs this round".

Shares are fractions of time, but a round (360 s) runs whole gangs. Gavel bridges the two like a
fair teacher handing out turns: before each round, job ``m``'s **priority** on flavor ``j`` is
its share divided by the fraction of time it actually received there,

    priority[m, j] = X[m, j] / f[m, j]       (X · 1e9 when f = 0; 0 when X = 0)

so whoever is furthest behind its share goes first. Ties go to the larger **deficit** (time owed
minus time received), then to the larger share, then to the earlier job. One list per flavor is
sorted that way and the lists are concatenated in a flavor order (fastest first for the
heterogeneity-aware policies; shuffled each round for the agnostic ones); a greedy pass then
takes the first entries that fit.

Tessera's policies and the ``--compat gavel`` twins share this module; they differ only in how
``f`` and the deficit are counted (Tessera: time since the last reallocation; Gavel: 180 s seeds
and deficits that accumulate forever, see :mod:`.state`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId


@dataclass(frozen=True, slots=True)
class Shares:
    """An allocation: the fraction of time each job should spend on each flavor.

    Attributes:
        jobs: row order.
        flavors: column order.
        x: ``len(jobs) × len(flavors)`` fractions in ``[0, 1]``.
    """

    jobs: tuple[JobId, ...]
    flavors: tuple[GpuFlavor, ...]
    x: np.ndarray

    def __contains__(self, jid: object) -> bool:
        return jid in self._rows()

    def _rows(self) -> dict[JobId, int]:
        return {j: i for i, j in enumerate(self.jobs)}

    def of(self, jid: JobId) -> dict[GpuFlavor, float] | None:
        """``{flavor: share}`` for one job, ``None`` if it has no share."""
        i = self._rows().get(jid)
        if i is None:
            return None
        return {f: float(self.x[i, k]) for k, f in enumerate(self.flavors)}

    def aligned(self, jobs: Sequence[JobId], flavors: Sequence[GpuFlavor]
                ) -> tuple[np.ndarray, np.ndarray]:
        """``(X, has)``: shares re-indexed to ``jobs × flavors`` (0 where absent) and which of
        ``jobs`` have a share at all."""
        rows = self._rows()
        cols = {f: k for k, f in enumerate(self.flavors)}
        x = np.zeros((len(jobs), len(flavors)))
        has = np.zeros(len(jobs), dtype=bool)
        src_r = [(m, rows[j]) for m, j in enumerate(jobs) if j in rows]
        src_c = [(k, cols[f]) for k, f in enumerate(flavors) if f in cols]
        if src_r and src_c:
            dm, sm = (np.array(v) for v in zip(*src_r, strict=True))
            dk, sk = (np.array(v) for v in zip(*src_c, strict=True))
            x[np.ix_(dm, dk)] = self.x[np.ix_(sm, sk)]
            has[dm] = True
        return x, has


def priorities(share: np.ndarray, fraction: np.ndarray, runnable: np.ndarray) -> np.ndarray:
    """Gavel's priority ``X / f`` (``X · 1e9`` where ``f <= 0``; 0 where ``X <= 0`` or the job
    cannot run on the flavor)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(fraction > 0, share / fraction, share * 1e9)
    return np.where((share <= 0) | ~runnable, 0.0, p)


def ranked_entries(
    priority: np.ndarray,
    deficit: np.ndarray,
    share: np.ndarray,
    listed: np.ndarray,
    flavor_cols: Sequence[int],
) -> list[tuple[int, int]]:
    """The concatenated per-flavor lists as ``(row, col)`` pairs.

    For each column in ``flavor_cols`` (in that order), the rows where ``listed`` is true,
    sorted by ``(priority, deficit, share)`` descending; ties keep ascending row order
    (Python's stable ``sort(reverse=True)`` on the same keys gives the same order).
    """
    out: list[tuple[int, int]] = []
    ids = np.arange(priority.shape[0])
    for k in flavor_cols:
        rows = ids[listed[:, k]]
        keys = np.lexsort((rows, -share[rows, k], -deficit[rows, k], -priority[rows, k]))
        out.extend(zip(rows[keys].tolist(), [k] * len(rows), strict=True))
    return out


@dataclass(frozen=True, slots=True)
class RoundState:
    """Tessera's mechanism memory between rounds.

    Attributes:
        shares: the allocation computed at the last reallocation.
        reset_s: when it was computed (the counters restart then).
        run_at_reset: each job's seconds run per flavor at that moment.
        jobs: the active jobs then (a change is what triggers the next reallocation).
    """

    shares: Shares
    reset_s: float
    run_at_reset: Mapping[JobId, tuple[tuple[GpuFlavor, float], ...]]
    jobs: frozenset[JobId]


class ShareNotes(Mapping[JobId, str]):
    """Per-job "target share" explanations, formatted only when someone reads them."""

    def __init__(self, shares: Shares, prefix: str = "target share ",
                 label: Mapping[GpuFlavor, str] | None = None, min_share: float = 0.0) -> None:
        self._shares = shares
        self._rows = shares._rows()
        self._prefix = prefix
        self._label = label or {}
        self._min = min_share

    def _parts(self, jid: JobId) -> list[str]:
        i = self._rows.get(jid)
        if i is None:
            return []
        row = self._shares.x[i]
        return [f"{self._label.get(f, f.short)} {row[k]:.2f}"
                for k, f in enumerate(self._shares.flavors) if row[k] > self._min]

    def __getitem__(self, jid: JobId) -> str:
        parts = self._parts(jid)
        if not parts:
            raise KeyError(jid)
        return self._prefix + ", ".join(parts)

    def __iter__(self) -> Iterator[JobId]:
        return (jid for jid in self._shares.jobs if self._parts(jid))

    def __len__(self) -> int:
        return sum(1 for _ in self)
