"""How far a live job got: each run's steps at the speed it ran, alone or sharing its GPUs.

The service does not read a job's own step counter; it measures progress the way the
simulator does, in the oracle's steps: time run × the job's speed there. A run's speed is
its placement's speed (:meth:`~tessera.sched.core.oracle.ThroughputOracle.placement_rate`: its
flavor, or the planner's speed for a mixed gang) while it has its GPUs to itself, and the
measured *pair* speed (:func:`~tessera.perf.colocation.pair_rates`, Gavel's co-location
table) while another job's run shares them -- the speeds the simulator's
:class:`~tessera.sim.sharing.SharingWorld` runs a pair at, so a policy that reads remaining
work sees the same numbers live as in simulation.

A run's speed changes only when a partner's run starts on its GPUs or a run of the pair ends.
At each such moment the run that stays is **settled**: the steps it made at the old speed are
added to its allocation's ``steps`` and ``settled_s`` moves to now. A run's steps so far are
therefore ``steps + (now - since) × speed now``, with ``since`` its last settlement (or its
start). When a run ends, its steps are added to the job's ``steps_done``; a job stored before
this bookkeeping has none, and its earlier runs count at their flavors' speeds, as before.

Two runs *share* only while both have started, hold the GPUs (running, or draining after a
stop) and name each other: a partner planned but not yet launched does not slow its host, and
a run draining after a stop no longer slows a partner the decision relabelled.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from dataclasses import dataclass

from tessera.live.sharing import riders
from tessera.live.store import Allocation, JobRecord, Store
from tessera.model.jobs import JobSpec
from tessera.perf.colocation import PairRefusal, pair_rates
from tessera.sched.core.oracle import ThroughputOracle

#: Allocation statuses of a run that has GPUs and may be running on them.
_ON_GPUS = ("running", "stopping")


def running_mates(holding: list[Allocation]) -> dict[tuple[str, int], Allocation]:
    """``{run: the run sharing its GPUs}``, both ways, for every pair whose two runs have
    started, still hold their GPUs, and name each other.

    A decision labels both runs of a pair, and relabels a run that stays when its partner
    leaves (:func:`~tessera.live.sharing.relabel_run`). So a run that outlives its pairing -- a
    partner moving away or stopped and still draining, or a job moving onto its new partner's
    node while its old run drains there (GPUs are counted per node) -- is not slowed by the
    draining run, whichever of the two stayed: in the simulator the leaving job leaves at once.
    """
    by_key = {(a.job_id, a.run): a for a in holding}
    out: dict[tuple[str, int], Allocation] = {}
    for rider, host in riders(holding).items():
        r, h = by_key[rider], by_key[host]
        if r.job_id not in h.placement.colocated_with:
            continue
        if _on_gpus(r) and _on_gpus(h):
            out[rider], out[host] = h, r
    return out


def _on_gpus(a: Allocation) -> bool:
    return a.status in _ON_GPUS and a.started_s is not None


@dataclass(frozen=True, slots=True)
class RunSpeeds:
    """A run's speed and steps, from the service's oracle (see the module docstring)."""

    oracle: ThroughputOracle

    def rate(self, spec: JobSpec, a: Allocation, mate: JobSpec | None) -> float:
        """Steps per second of run ``a`` of ``spec``: its pair speed beside ``mate``'s run,
        else (no partner, or a pair never measured) its placement's speed."""
        if mate is not None:
            rates = pair_rates(self.oracle.table, spec, mate, a.placement.flavor)
            if not isinstance(rates, PairRefusal):
                return rates.first_steps_per_s
        return self.oracle.placement_rate(spec, a.placement)

    @staticmethod
    def since_s(a: Allocation) -> float | None:
        """Where run ``a``'s unsettled time starts: its last settlement, else its start."""
        return a.settled_s if a.settled_s is not None else a.started_s

    def steps(self, a: Allocation, rate: float, now_s: float) -> float:
        """Run ``a``'s steps up to ``now_s``, running at ``rate`` since its last settlement."""
        since = self.since_s(a)
        if since is None:
            return a.steps
        return a.steps + max(now_s - since, 0.0) * rate

    def done_before(self, rec: JobRecord) -> float:
        """Steps of the job's runs that ended (its earlier runs at their flavors' speeds when
        it was stored before runs kept their steps)."""
        if rec.steps_done is not None:
            return rec.steps_done
        spec = rec.job.spec
        return sum(s * self.oracle.rate(spec, f, True) for f, s in rec.run_s_by_flavor.items())

    def settle(self, store: Store, db: sqlite3.Connection, a: Allocation, mate: JobSpec | None,
               now_s: float) -> None:
        """Run ``a``'s speed changes at ``now_s``: bank its steps at the speed it had (beside
        ``mate``'s run, or alone) and start its unsettled time afresh."""
        rec = store.get(a.job_id)
        if rec is None or self.since_s(a) is None:
            return
        steps = self.steps(a, self.rate(rec.job.spec, a, mate), now_s)
        store.set_allocation(db, a.job_id, a.run, steps=steps, settled_s=now_s)

    def settle_all(self, store: Store, db: sqlite3.Connection, now_s: float,
                   jobs: Collection[str]) -> None:
        """Bank the steps of every started run of ``jobs``, and of their partners, up to
        ``now_s`` at the speed each has now (beside its partner, or alone). A decision calls
        this for the jobs it starts, relabels or stops, before it does: those change the
        labels that say who ran beside whom until now, so the time before ``now_s`` must be
        counted while they still say it."""
        holding = store.allocations(_ON_GPUS)
        mates = running_mates(holding)
        for a in holding:
            mate = mates.get((a.job_id, a.run))
            if self.since_s(a) is None or (
                    a.job_id not in jobs and (mate is None or mate.job_id not in jobs)):
                continue
            mate_rec = store.get(mate.job_id) if mate is not None else None
            self.settle(store, db, a, mate_rec.job.spec if mate_rec is not None else None,
                        now_s)

    def joined(self, store: Store, db: sqlite3.Connection, a: Allocation, now_s: float) -> None:
        """Run ``a`` has just started: a host whose GPUs it joins ran alone until now."""
        host = self._mate_of(store, a)
        if host is not None:
            self.settle(store, db, host, None, now_s)

    def ended(self, store: Store, db: sqlite3.Connection, a: Allocation,
              now_s: float) -> tuple[float, Allocation | None]:
        """Run ``a`` ends at ``now_s``: its partner, if any, ran beside it until now (settled
        at the pair speed). Returns ``a``'s own steps and that partner's run (as it was)."""
        a = store.allocation(a.job_id, a.run) or a  # (a partner's end may have settled it)
        rec = store.get(a.job_id)
        mate = self._mate_of(store, a)
        mate_rec = store.get(mate.job_id) if mate is not None else None
        if mate is not None and mate_rec is not None and rec is not None:
            self.settle(store, db, mate, rec.job.spec, now_s)
        if rec is None:
            return 0.0, mate
        mate_spec = mate_rec.job.spec if mate_rec is not None else None
        return self.steps(a, self.rate(rec.job.spec, a, mate_spec), now_s), mate

    def _mate_of(self, store: Store, a: Allocation) -> Allocation | None:
        """The started run sharing ``a``'s GPUs, if any (``a`` as stored now)."""
        key = (a.job_id, a.run)
        holding = [b for b in store.allocations(_ON_GPUS) if (b.job_id, b.run) != key]
        return running_mates([*holding, a]).get(key)
