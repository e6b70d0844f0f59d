"""Gavel's packed policies, ``max_min_fairness_packed`` and ``fifo_packed``, as compat twins.

Gavel (``scheduler.py`` @ c4fa400) packs by scheduling *combinations* -- a job alone, or two
jobs of the same gang size sharing GPUs at the pair speeds it measured. The round mechanism is
the unpacked one (:mod:`tessera.sched.gavel.compat_mechanism`) applied to combinations
(:mod:`tessera.sched.gavel.packed`): gated recompute, deficits, ``share / (time / total)``
priorities, per-type lists in ``v100, p100, k80`` order (never shuffled: the name contains
"Packing"), one greedy pass that skips a combination whose member already runs. The policies
differ only in the shares:

* **``max_min_fairness_packed``** (``MaxMinFairnessPolicyWithPacking``): the packed max-min LP
  (:mod:`tessera.sched.gavel.packed_lp`).
* **``fifo_packed``** (``FIFOPolicyWithPacking``): ``fifo_perf``'s assignment rebuilt at every
  recompute, then the jobs still queued are packed, in order, each with the already assigned job
  whose pair gives the largest normalised throughput ``Σ pair / alone`` above 1.5; the first
  that finds none stops packing (FIFO: nobody jumps the queue). Priority-0 entries are refused
  (the name starts with "FIFO").

Gavel has no ``-agnostic`` packed policies; ours compute the shares as if every flavor ran
at the reference flavor's measured speeds (alone and paired) and run at the real ones.

The twin returns hosts as candidates and the partners in ``Ranking.colocate``; the core places
the hosts and puts the partners on the same GPUs (:mod:`tessera.sched.packing.pairs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.perf.colocation import PairRefusal, pair_rates
from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView
from tessera.sched.gavel import Backend, priorities, ranked_entries, resolve_solver
from tessera.sched.gavel.compat_mechanism import (
    GavelCompatConfig,
    _perf_order,
    gavel_type,
    run_round_s,
)
from tessera.sched.gavel.packed import (
    Combo,
    GandivaMemory,
    PackedState,
    combos_of,
    gavel_sorted,
    id_key,
    reset_counters,
)
from tessera.sched.gavel.packed_lp import PackedProblem, packed_max_min

#: Gavel's ``packing_threshold``: pack only when the pair beats time-slicing by this much.
FIFO_PACKING_THRESHOLD = 1.5


class Speeds:
    """Gavel's ``_throughputs`` for the round: isolated speed per job and flavor, pair speeds
    per pair and flavor (``(0, 0)`` where the pair may not run).

    With ``blind`` (the ``-agnostic`` twin, which Gavel does not have) the speeds every flavor
    is credited with *for the shares* are those measured on the reference flavor (as Gavel's
    agnostic finish-time fairness does); :meth:`runnable` always reads the real ones.
    """

    def __init__(self, ctx: PolicyContext, jobs: Sequence[JobView], flavors: Sequence[GpuFlavor],
                 combos: Sequence[Combo], blind: bool = False) -> None:
        self.flavors = tuple(flavors)
        self.alone: dict[JobId, tuple[float, ...]] = {}
        by_id = {j.job_id: j for j in jobs}
        for j in jobs:
            r = {x.flavor: x.consolidated for x in ctx.oracle.real_rates(j.spec)}
            self.alone[j.job_id] = tuple(r.get(f, 0.0) for f in flavors)
        self.pair: dict[Combo, tuple[tuple[float, float], ...]] = {}
        table = ctx.oracle.table
        for c in combos:
            if len(c) == 2:
                a, b = by_id[c[0]].spec, by_id[c[1]].spec
                row = []
                for k, f in enumerate(flavors):
                    got = pair_rates(table, a, b, f)
                    # A job that may not run on a flavor alone (not allowed, or no speed
                    # there) may not run there paired either.
                    alone = self.alone[a.job_id][k] > 0 and self.alone[b.job_id][k] > 0
                    row.append((0.0, 0.0) if isinstance(got, PairRefusal) or not alone else
                               (got.first_steps_per_s, got.second_steps_per_s))
                self.pair[c] = tuple(row)
        self.real_alone, self.real_pair = dict(self.alone), dict(self.pair)
        ref = table.reference_flavor
        if blind and ref in self.flavors:
            k = self.flavors.index(ref)
            n = len(self.flavors)
            self.alone = {j: (v[k],) * n for j, v in self.alone.items()}
            self.pair = {c: (v[k],) * n for c, v in self.pair.items()}

    def runnable(self, c: Combo, k: int) -> bool:
        if len(c) == 1:
            return self.real_alone[c[0]][k] > 0
        a, b = self.real_pair[c][k]
        return a > 0 and b > 0


class GavelPackedPolicy(Policy):
    """Gavel's packed round mechanism; subclasses compute the shares per combination."""

    preemptive = True
    round_based = True
    packs = True
    Config = GavelCompatConfig
    refuses_zero_priority: ClassVar[bool] = False

    def _cfg(self) -> GavelCompatConfig:
        cfg = self.config
        assert isinstance(cfg, GavelCompatConfig)
        return cfg

    def shares(self, ctx: PolicyContext, jobs: Sequence[JobView], combos: Sequence[Combo],
               speeds: Speeds, cap: Mapping[GpuFlavor, int], memory: GandivaMemory | None
               ) -> tuple[dict[Combo, tuple[float, ...]], GandivaMemory | None,
                          tuple[str, ...]]:
        """Gavel's ``_compute_allocation``: a share per combination and flavor (in
        ``speeds.flavors`` order), the policy object's new memory, and fallbacks."""
        raise NotImplementedError

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self._cfg()
        snap = ctx.snapshot
        st = (snap.policy_state if isinstance(snap.policy_state, PackedState)
              else PackedState.initial())
        now = snap.now_s
        seed = run_round_s(snap) / 2.0  # (the run's round, never a second setting)
        cap: dict[GpuFlavor, int] = {}
        for node in snap.up_nodes():
            cap[node.flavor] = cap.get(node.flavor, 0) + node.gpus
        flavors = tuple(cap)
        jobs = sorted(snap.jobs, key=lambda j: id_key(j.job_id))
        gang = {j.job_id: j.spec.num_gpus for j in jobs}
        combos = combos_of([j.job_id for j in jobs], gang)
        speeds = Speeds(ctx, jobs, flavors, combos, blind=self.agnostic)
        time_s, deficit, worker = st.arrays(combos, flavors, seed)
        old_x, _had = st.share_matrix(combos, flavors)
        need_update = st.need_update or set(combos) != set(st.time_s)
        shares, last_reset, memory = st.shares, st.last_reset_s, st.memory
        fallbacks: tuple[str, ...] = ()
        elapsed = now - last_reset
        if need_update and (elapsed >= cfg.reset_interval_s or last_reset == 0):
            time_s, deficit, worker = reset_counters(time_s, deficit, old_x, elapsed, seed)
            last_reset = now
            shares, memory, fallbacks = self.shares(ctx, jobs, combos, speeds, cap, memory)
            need_update = False
        state = PackedState(flavors, {c: tuple(time_s[i]) for i, c in enumerate(combos)},
                            {c: tuple(deficit[i]) for i, c in enumerate(combos)},
                            tuple(worker), shares, last_reset, need_update, memory)
        x, has = state.share_matrix(combos, flavors)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(worker == 0.0, 0.0, time_s / worker)
        runnable = np.array([[speeds.runnable(c, k) for k in range(len(flavors))]
                             for c in combos], dtype=bool).reshape(len(combos), len(flavors))
        prio = priorities(x, frac, runnable)
        order = _perf_order(flavors)
        col = {f: k for k, f in enumerate(flavors)}
        queue = ranked_entries(prio, deficit, x, np.ones(x.shape, dtype=bool),
                               [col[f] for f in order])
        left = [cap[f] for f in flavors]
        busy: set[JobId] = set()
        picked: list[tuple[int, int]] = []
        for m, k in queue:
            c = combos[m]
            if left[k] == 0 or any(j in busy for j in c) or not runnable[m, k]:
                continue
            if self.refuses_zero_priority and prio[m, k] <= 0.0:
                continue
            if gang[c[0]] > left[k]:
                continue
            left[k] -= gang[c[0]]
            busy.update(c)
            picked.append((m, k))
        # A picked combination without a share gets no workers: its GPUs idle this round.
        run = [(combos[m], flavors[k]) for m, k in picked if has[m]]
        run.sort(key=lambda e: -gang[e[0][0]])
        partners = {c[1]: c[0] for c, _f in run if len(c) == 2}
        notes = _notes(shares, combos)
        return Ranking(tuple((c[0], f) for c, f in run), state=state, notes=notes,
                       fallbacks=fallbacks, colocate=partners)


def _notes(shares: Mapping[Combo, tuple[float, ...]] | None, combos: Sequence[Combo]
           ) -> dict[JobId, str]:
    notes: dict[JobId, str] = {}
    if not shares:
        return notes
    for c in combos:
        row = shares.get(c)
        if row is not None and len(c) == 2 and max(row) > 1e-6:
            for j, other in ((c[0], c[1]), (c[1], c[0])):
                notes[j] = (notes.get(j, "Gavel packed share") +
                            f"; with job {other} {max(row):.2f}")
    return notes


class GavelMaxMinFairnessPacked(GavelPackedPolicy):
    """``MaxMinFairnessPolicyWithPacking`` with Gavel's round mechanism."""

    def shares(self, ctx: PolicyContext, jobs: Sequence[JobView], combos: Sequence[Combo],
               speeds: Speeds, cap: Mapping[GpuFlavor, int], memory: GandivaMemory | None
               ) -> tuple[dict[Combo, tuple[float, ...]], GandivaMemory | None,
                          tuple[str, ...]]:
        if not jobs:
            return {}, memory, ()
        types = tuple(sorted(speeds.flavors, key=gavel_type))
        tcol = [speeds.flavors.index(f) for f in types]
        ordered = gavel_sorted(combos)
        pos = {c: i for i, c in enumerate(ordered)}
        ids = tuple(j.job_id for j in jobs)
        gang = {j.job_id: j.spec.num_gpus for j in jobs}
        belongs: dict[JobId, list[int]] = {jid: [] for jid in ids}
        for ci, c in enumerate(ordered):
            for jid in c:
                belongs[jid].append(ci)
        members: list[tuple[int, ...]] = []
        member_speed: list[np.ndarray] = []
        for jid in ids:
            mine = belongs[jid]
            members.append(tuple(mine))
            rows = []
            for ci in mine:
                c = ordered[ci]
                if len(c) == 1:
                    rows.append([speeds.alone[jid][k] for k in tcol])
                else:
                    side = c.index(jid)
                    rows.append([speeds.pair[c][k][side] for k in tcol])
            # Gavel keeps these per-job throughput matrices in float32 (its ``flatten``).
            member_speed.append(np.array(rows, dtype=np.float32).astype(float))
        problem = PackedProblem(
            jobs=ids, combos=tuple(ordered), members=tuple(members),
            member_speed=tuple(member_speed),
            scale=np.array([gang[c[0]] for c in ordered], dtype=float),
            weight=np.array([j.spec.priority_weight for j in jobs], dtype=float),
            isolated=np.array([[speeds.alone[j][k] for k in tcol] for j in ids], dtype=float),
            capacity=np.array([cap[f] for f in types], dtype=float),
        )
        backend = Backend(ctx.lp(), resolve_solver(self._cfg().solver))
        x, fallbacks = packed_max_min(problem, backend, gavel_form=True)
        back = [types.index(f) for f in speeds.flavors]
        return ({c: tuple(float(x[pos[c], k]) for k in back) for c in combos}, memory,
                fallbacks)


class GavelFifoPacked(GavelPackedPolicy):
    """``FIFOPolicyWithPacking`` with Gavel's round mechanism."""

    refuses_zero_priority = True

    def shares(self, ctx: PolicyContext, jobs: Sequence[JobView], combos: Sequence[Combo],
               speeds: Speeds, cap: Mapping[GpuFlavor, int], memory: GandivaMemory | None
               ) -> tuple[dict[Combo, tuple[float, ...]], GandivaMemory | None,
                          tuple[str, ...]]:
        flavors = speeds.flavors
        names = {f: gavel_type(f) for f in flavors}
        available = dict(cap)
        gang = {j.job_id: j.spec.num_gpus for j in jobs}
        assigned: dict[Combo, GpuFlavor] = {}
        queue = [j.job_id for j in jobs]  # ascending id
        types = sorted((f for f in flavors if available[f] > 0), key=lambda f: names[f])
        k_of = {f: k for k, f in enumerate(flavors)}
        while queue and types:
            jid = queue.pop(0)
            s = gang[jid]
            cands = [(i, f) for i, f in enumerate(types) if available[f] >= s]
            if not cands:
                break
            idx, chosen, best = 0, cands[0][1], -1.0
            for n, (_i, f) in enumerate(cands):
                if speeds.alone[jid][k_of[f]] > best:
                    best, idx, chosen = speeds.alone[jid][k_of[f]], n, f
            if speeds.alone[jid][k_of[chosen]] > 0.0:
                assigned[(jid,)] = chosen
                available[chosen] -= s
                if available[chosen] == 0:
                    types.pop(cands[idx][0])
        while queue:  # Gavel's _pack: no job may jump the queue
            jid = queue.pop(0)
            best_gain, host = FIFO_PACKING_THRESHOLD, None
            for c, f in assigned.items():
                if len(c) == 2 or gang[c[0]] != gang[jid]:
                    continue
                pair = (c[0], jid) if id_key(c[0]) < id_key(jid) else (jid, c[0])
                k = k_of[f]
                rates = speeds.pair.get(pair, tuple((0.0, 0.0) for _ in flavors))[k]
                gain = 0.0
                for side, member in enumerate(pair):
                    if rates[side] > 0.0:
                        gain += rates[side] / speeds.alone[member][k]
                if gain > best_gain:
                    best_gain, host = gain, c
            if host is None:
                break
            f = assigned.pop(host)
            pair = (host[0], jid) if id_key(host[0]) < id_key(jid) else (jid, host[0])
            assigned[pair] = f
        zero = tuple(0.0 for _ in flavors)
        out = {c: zero for c in combos}
        for c, f in assigned.items():
            out[c] = tuple(1.0 if g == f else 0.0 for g in flavors)
        return out, memory, ()
