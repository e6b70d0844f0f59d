"""Gavel's packed round mechanism: shares, time and priorities per *job combination*.

With a packing policy Gavel schedules **combinations**: every active job alone, and every pair
of active jobs with the same gang size (Gavel's ``JobIdPair``). Each combination has its own
share ``X[c, type]``, its own time received, deficit and priority, exactly like a single job in
the unpacked mechanism (:mod:`.state`), and the greedy pass picks combinations, skipping one
whose member already runs this round. The details that decide a trace's JCT, reproduced here:

* **order** -- Gavel's per-type lists are dicts filled as jobs arrive: a job, then its pairs
  with the jobs already active (ascending id). Sorting is stable, so ties keep that order;
  :func:`combos_of` yields it.
* **seeds** -- a new job is seeded with 180 s on every type; a new pair with **0 s**
  (Gavel's ``_populate_job_combination_metadata``); at a reset every combination restarts at
  180 s, and each type's total at 180 s times the number of combinations.
* **credit** -- a pair's micro-task credits the pair's time (the longer of its two jobs' run
  times), once, and the type's total once.
* **completion** -- both jobs of a pair finish the round at the pair's latest finish.

:class:`PackedState` is the memory between rounds; :func:`credit_combos` adds a round's time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId

Combo = tuple[JobId, ...]
"""One job ``(a,)`` or a pair ``(a, b)`` with ``a`` before ``b`` in Gavel's id order."""


def id_key(jid: JobId) -> tuple[int, int | str]:
    """Gavel's job-id order: numeric ids by value, then any other id by name."""
    s = str(jid)
    return (0, int(s)) if s.isdigit() else (1, s)


def combos_of(jobs: Sequence[JobId], gang: Mapping[JobId, int]) -> list[Combo]:
    """Every combination of ``jobs`` in Gavel's insertion order: each job (in id order)
    followed by its pairs with the earlier jobs of the same gang size."""
    ordered = sorted(jobs, key=id_key)
    out: list[Combo] = []
    for k, b in enumerate(ordered):
        out.append((b,))
        out.extend((a, b) for a in ordered[:k] if gang[a] == gang[b])
    return out


def gavel_sorted(combos: Sequence[Combo]) -> list[Combo]:
    """Gavel's ``sorted(JobIdPair ...)``: single jobs by id, then pairs lexicographically."""
    return sorted(combos, key=lambda c: (len(c), [id_key(j) for j in c]))


@dataclass(frozen=True, slots=True)
class GandivaMemory:
    """Gavel's Gandiva policy object: each job's current partner (``None``: alone) with the
    pair, in the order they were assigned, and the state of ``random.Random(seed)``."""

    assigned: Mapping[JobId, tuple[Combo, JobId | None]]
    rng: Any


@dataclass(frozen=True, slots=True)
class PackedState:
    """Gavel's packed scheduler state between rounds.

    Attributes:
        flavors: the flavor order of every per-flavor tuple below.
        time_s: per combination, seconds received on each flavor since the last reset (seeds
            included).
        deficit_s: per combination, seconds owed on each flavor, accumulated over resets.
        worker_time_s: seconds handed out per flavor since the last reset, seeds included.
        shares: the last computed allocation per combination; ``None`` before the first.
        last_reset_s: when the counters were last reset (0 also means "gate open").
        need_update: an arrival, completion or failed micro-task since the last recompute.
        memory: the policy object's own state (Gandiva's pairs and random stream).
    """

    flavors: tuple[GpuFlavor, ...]
    time_s: Mapping[Combo, tuple[float, ...]]
    deficit_s: Mapping[Combo, tuple[float, ...]]
    worker_time_s: tuple[float, ...]
    shares: Mapping[Combo, tuple[float, ...]] | None
    last_reset_s: float
    need_update: bool
    memory: GandivaMemory | None = None

    @classmethod
    def initial(cls) -> PackedState:
        return cls((), {}, {}, (), None, 0.0, True)

    def arrays(self, combos: Sequence[Combo], flavors: Sequence[GpuFlavor], seed_s: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(time, deficit, worker_time)`` for ``combos × flavors``; a new job gets ``seed_s``
        on every flavor, a new pair 0, both zero deficits."""
        col = {f: k for k, f in enumerate(self.flavors)}
        src = [col.get(f, -1) for f in flavors]
        m, n = len(combos), len(flavors)
        time_s = np.zeros((m, n))
        deficit = np.zeros((m, n))
        for i, c in enumerate(combos):
            t = self.time_s.get(c)
            if t is None:
                time_s[i, :] = seed_s if len(c) == 1 else 0.0
                continue
            d = self.deficit_s[c]
            for k, s in enumerate(src):
                time_s[i, k] = t[s] if s >= 0 else 0.0
                deficit[i, k] = d[s] if s >= 0 else 0.0
        worker = np.array([self.worker_time_s[s] if s >= 0 else 0.0 for s in src])
        return time_s, deficit, worker.reshape(n)

    def share_matrix(self, combos: Sequence[Combo], flavors: Sequence[GpuFlavor]
                     ) -> tuple[np.ndarray, np.ndarray]:
        """``(X, has_share)``: the allocation of each combination (0 where it has none) and
        whether it is in the allocation at all."""
        m, n = len(combos), len(flavors)
        x = np.zeros((m, n))
        has = np.zeros(m, dtype=bool)
        if self.shares is None:
            return x, has
        col = {f: k for k, f in enumerate(self.flavors)}
        for i, c in enumerate(combos):
            row = self.shares.get(c)
            if row is None:
                continue
            has[i] = True
            for k, f in enumerate(flavors):
                s = col.get(f)
                x[i, k] = row[s] if s is not None else 0.0
        return x, has


def reset_counters(
    time_s: np.ndarray, deficit: np.ndarray, old_share: np.ndarray, elapsed_s: float,
    seed_s: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gavel's ``_reset_time_run_so_far`` over combinations: deficits grow by the time owed
    minus the time received (the seed removed), every time restarts at the seed, and each
    flavor's total at the seed times the number of combinations."""
    deficit = deficit + (old_share * elapsed_s - (time_s - seed_s))
    m, n = time_s.shape
    total = 0.0
    for _ in range(m):
        total += seed_s
    return np.full((m, n), seed_s), deficit, np.full(n, total)


def credit_combos(
    state: PackedState,
    credits: Sequence[tuple[Combo, GpuFlavor, float]],
    event: bool,
    drained: bool,
) -> PackedState:
    """Add one round's micro-task times: each combination's time and its flavor's total."""
    col = {f: k for k, f in enumerate(state.flavors)}
    times = dict(state.time_s)
    worker = list(state.worker_time_s)
    for combo, fl, s in credits:
        k = col.get(fl)
        if k is None:
            continue
        t = times.get(combo)
        if t is not None:
            row = list(t)
            row[k] += s
            times[combo] = tuple(row)
        worker[k] += s
    return replace(
        state, time_s=times, worker_time_s=tuple(worker),
        need_update=state.need_update or event,
        last_reset_s=0.0 if drained else state.last_reset_s,
    )
