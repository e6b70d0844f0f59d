"""The per-job rows a Gavel allocation policy reads every round, kept between rounds
(:class:`ShareRows`), and one round's gathering of them (:class:`Gathered`); used by
:mod:`tessera.sched.gavel.lp_policy`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec
from tessera.sched.core.oracle import RateKey, ThroughputOracle, rate_key
from tessera.sched.gavel.mechanism import RoundState


class ShareRows:
    """What a round of Gavel's mechanism reads per job that does not change between rounds:
    each job's share and time run at the last reallocation (fixed until the next one), and
    which flavors its spec can use (fixed for the oracle and the flavors that are up).

    Rows are kept in a fixed column order (the flavors sorted by name; a round's flavor
    order, shuffled for agnostic policies, is a permutation of it); the matrices have one
    extra row of zeros, the row of a job the reallocation did not know. The arithmetic a
    round does on them is the one it did on rebuilt matrices, so the ranking is the same
    bit for bit.
    """

    __slots__ = ("_kinds", "_usable", "_usable_array", "at_reset", "col", "gathered",
                 "kind_of", "oracle", "row_of", "state", "x")

    def __init__(self, state: RoundState, oracle: ThroughputOracle, columns: tuple[GpuFlavor, ...],
                 kinds: ShareRows | None) -> None:
        self.state = state
        self.oracle = oracle
        self.col = {f: k for k, f in enumerate(columns)}
        jids = list(state.shares.jobs)
        row_of = {jid: m for m, jid in enumerate(jids)}
        for jid in state.run_at_reset:
            row_of.setdefault(jid, len(row_of))
        self.row_of = row_of
        n, f_count = len(row_of), len(columns)
        self.x = np.zeros((n + 1, f_count))
        self.x[:len(jids)] = state.shares.aligned(jids, columns)[0]
        self.at_reset = np.zeros((n + 1, f_count))
        col = self.col
        where = [(row_of[jid], col[f], ran) for jid, ran_by_flavor in state.run_at_reset.items()
                 for f, ran in ran_by_flavor if f in col]
        if where:
            m, k, ran = zip(*where, strict=True)
            np.add.at(self.at_reset, (np.array(m, dtype=np.intp), np.array(k, dtype=np.intp)),
                      np.array(ran))
        # (job id -> (its spec, its kind)); a kind is a row of ``_usable``
        self.kind_of: dict[JobId, tuple[JobSpec, int]] = {}
        self._kinds: dict[RateKey, int] = {}
        self._usable: list[list[bool]] = []
        self._usable_array = np.zeros((0, f_count), dtype=bool)
        if kinds is not None and kinds.oracle is oracle and kinds.col == self.col:
            self.kind_of, self._kinds, self._usable = kinds.kind_of, kinds._kinds, kinds._usable
        self.gathered: Gathered | None = None

    @classmethod
    def of(cls, state: RoundState, oracle: ThroughputOracle, flavors: Sequence[GpuFlavor],
           last: ShareRows | None) -> ShareRows:
        """The rows of ``state``, keeping ``last``'s usable flavors when they still apply."""
        return cls(state, oracle, tuple(sorted(flavors, key=lambda f: f.short)), last)

    def serves(self, state: RoundState, oracle: ThroughputOracle, flavors: Sequence[GpuFlavor]
               ) -> bool:
        """Whether these rows are ``state``'s, for ``oracle`` and this set of flavors."""
        col = self.col
        return (state is self.state and oracle is self.oracle and len(flavors) == len(col)
                and all(f in col for f in flavors))

    def perm(self, flavors: Sequence[GpuFlavor]) -> list[int]:
        """The fixed columns in ``flavors``' order."""
        return [self.col[f] for f in flavors]

    def kind(self, jid: JobId, spec: JobSpec, oracle: ThroughputOracle) -> int:
        """The kind of ``spec`` (which flavors it can use), noted for ``jid``."""
        key = rate_key(spec)
        k = self._kinds.get(key)
        if k is None:
            row = [False] * len(self.col)
            for r in oracle.rates(spec):
                c = self.col.get(r.flavor)
                if c is not None:
                    row[c] = True
            k = self._kinds[key] = len(self._usable)
            self._usable.append(row)
        self.kind_of[jid] = (spec, k)
        return k

    def usable(self) -> np.ndarray:
        """Which flavors each kind can use, one row per kind (rebuilt when a kind was added;
        kinds are only ever appended)."""
        if len(self._usable_array) != len(self._usable):
            self._usable_array = np.array(self._usable, dtype=bool).reshape(
                len(self._usable), len(self.col))
        return self._usable_array

    def gather(self, specs: list[JobSpec], perm: list[int], oracle: ThroughputOracle
               ) -> Gathered:
        """The rows of the jobs of ``specs`` (in that order), columns in ``perm``'s order.

        The answer depends only on the specs (their ids and rate keys), these rows and
        ``perm``; the last one is kept and returned again while all three are equal.
        """
        last = self.gathered
        if last is not None and last.perm == perm and last.specs == specs:
            return last
        n = len(specs)
        ids = [spec.job_id for spec in specs]
        kind_of = self.kind_of
        kinds = [kind[1] if kind is not None and kind[0] is spec
                 else self.kind(jid, spec, oracle)
                 for jid, spec, kind in zip(ids, specs, map(kind_of.get, ids), strict=True)]
        where = np.fromiter(map(self.row_of.get, ids, repeat(-1, n)), dtype=np.intp, count=n)
        x = self.x[where][:, perm]
        usable = self.usable()[np.array(kinds, dtype=np.intp)][:, perm]
        whole = np.arange(n)
        lists = []
        for k in range(len(perm)):
            listed = whole[usable[:, k]]
            lists.append((listed, -x[listed, k]))
        got = self.gathered = Gathered(specs=specs, perm=perm, ids=ids, x=x, usable=usable,
                                        at_reset=self.at_reset[where], lists=tuple(lists))
        return got


@dataclass(frozen=True, slots=True)
class Gathered:
    """One round's per-job rows of :class:`ShareRows`, kept for the next round with the same jobs.

    Attributes:
        specs: the jobs' specs, in the snapshot's order (the key, with ``perm``).
        perm: the fixed columns in the round's flavor order.
        ids: the jobs' ids.
        x: each job's share per flavor, in ``perm``'s order.
        usable: whether each job can use each flavor, in ``perm``'s order.
        at_reset: each job's seconds run per flavor at the reallocation, in the fixed order.
        lists: per flavor (``perm``'s order), the jobs that can use it (their positions) and
            their shares there, negated (the sort keys that do not change between rounds).
    """

    specs: list[JobSpec]
    perm: list[int]
    ids: list[JobId]
    x: np.ndarray
    usable: np.ndarray
    at_reset: np.ndarray
    lists: tuple[tuple[np.ndarray, np.ndarray], ...]
