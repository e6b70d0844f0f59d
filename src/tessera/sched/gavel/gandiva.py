"""Gavel's ``gandiva`` policy (``GandivaPolicy``, Xiao et al., OSDI'18), as a compat twin.

Gandiva packs jobs *at random* and keeps the pairs that pay. At each recompute, within Gavel's
packed round mechanism (:mod:`tessera.sched.gavel.packed_policy`):

1. a remembered pair is dropped when either job left, or when its normalised throughput --
   ``Σ over types and both jobs of pair speed / speed alone``, 0 if either side cannot run on
   some type -- is below 1; a job remembered alone is always returned to the pool;
2. if every job fits on its own GPUs (the jobs' GPUs ≤ the cluster's) nothing is packed: each
   job gets the same time share, ``(capacity / jobs) / gang``, rows scaled to sum ≤ 1;
3. otherwise the pool is paired at random: up to ``len(pool)`` draws of two jobs with
   ``random.Random(seed).sample(pool, 2)``, a draw of two different gang sizes wasted; what
   stays unpaired runs alone; every combination (pair or single) then gets the same share.

The random stream is Gavel's (``Random(seed)``, one ``sample`` per draw, kept across
recomputes), so a run with the same seed draws the same pairs. A drawn pair with no positive
measurement is scheduled anyway and, like in Gavel, never runs (its throughput is 0) until the
next recompute drops it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.policy import PolicyContext
from tessera.sched.core.snapshot import JobView
from tessera.sched.gavel.packed import Combo, GandivaMemory, id_key
from tessera.sched.gavel.packed_policy import GavelPackedPolicy, Speeds


def _gain(c: Combo, speeds: Speeds, cols: Sequence[int]) -> float:
    """Gavel's ``_get_normalized_throughput``: summed over types; 0 for a single job."""
    if len(c) == 1:
        return 0.0
    total = 0.0
    for k in cols:
        pair = speeds.real_pair[c][k]
        for side, jid in enumerate(c):
            if pair[side] <= 0.0:
                return 0.0
            total += pair[side] / speeds.real_alone[jid][k]
    return total


def _equal_shares(chosen: Sequence[Combo], gang: Mapping[JobId, int], flavors: Sequence[GpuFlavor],
                  cap: Mapping[GpuFlavor, int]) -> dict[Combo, tuple[float, ...]]:
    """The same time share for every combination in ``chosen``, as Gavel's helper computes it."""
    m = len(chosen)
    out: dict[Combo, tuple[float, ...]] = {}
    for c in chosen:
        row = np.array([cap[f] / m for f in flavors]) / gang[c[0]]
        row = row / max(float(row.sum()), 1.0)
        out[c] = tuple(float(v) for v in row)
    return out


class GavelGandiva(GavelPackedPolicy):
    """``GandivaPolicy`` with Gavel's packed round mechanism."""

    def shares(self, ctx: PolicyContext, jobs: Sequence[JobView], combos: Sequence[Combo],
               speeds: Speeds, cap: Mapping[GpuFlavor, int], memory: GandivaMemory | None
               ) -> tuple[dict[Combo, tuple[float, ...]], GandivaMemory | None,
                          tuple[str, ...]]:
        rng = random.Random()
        if memory is None:
            rng.seed(self._cfg().seed)
            assigned: dict[JobId, tuple[Combo, JobId | None]] = {}
        else:
            rng.setstate(memory.rng)
            assigned = dict(memory.assigned)
        flavors = speeds.flavors
        gang = {j.job_id: j.spec.num_gpus for j in jobs}
        active = set(gang)
        type_cols = sorted(range(len(flavors)), key=lambda k: flavors[k].short)
        drop: list[JobId | None] = []
        for jid, (combo, other) in assigned.items():
            gone = jid not in active or (other is not None and other not in active)
            if gone or _gain(combo, speeds, type_cols) < 1.0:
                drop.extend([jid, other])
        for dropped in drop:
            if dropped is not None:
                assigned.pop(dropped, None)
        singles = sorted(active, key=id_key)
        zero = tuple(0.0 for _ in flavors)
        out = {c: zero for c in combos}
        if sum(gang.values()) <= sum(cap.values()):
            out.update(_equal_shares([(j,) for j in singles], gang, flavors, cap))
            return out, GandivaMemory(assigned, rng.getstate()), ()
        pool = [j for j in singles if j not in assigned]
        draws, n = 0, len(pool)
        while len(pool) > 1 and draws < n:
            draws += 1
            a, b = rng.sample(pool, 2)
            if gang[a] != gang[b]:
                continue
            pool.remove(a)
            pool.remove(b)
            pair = (a, b) if id_key(a) < id_key(b) else (b, a)
            assigned[a] = (pair, b)
            assigned[b] = (pair, a)
        for jid in pool:
            assigned[jid] = ((jid,), None)
        chosen = list(dict.fromkeys(c for c, _o in assigned.values()))
        out.update(_equal_shares(chosen, gang, flavors, cap))
        return out, GandivaMemory(assigned, rng.getstate()), ()
