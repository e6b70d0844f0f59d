"""Gavel's scheduler bookkeeping between rounds, as typed records (``--compat gavel``).

Gavel keeps, per job and flavor, the **time received** since the last reset (seeded with half a
round, 180 s, so nobody starts at zero), per flavor the **total time** handed out (seeded with
180 s per job), and per job and flavor a **deficit** (time owed minus time received) that is
added to at every reset and never cleared. Priorities are ``share / (job time / flavor time)``
(:mod:`.mechanism`). Shares are recomputed only behind a gate: something happened (arrival,
completion, failed micro-task) *and* at least 1,920 s passed since the last reset (or the last
reset was at time 0).

:class:`GavelState` is that memory; :func:`credit_round` adds one round's time to it (the
simulator calls it through ``gavel_boundary`` at each round boundary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.gavel.mechanism import Shares


@dataclass(frozen=True, slots=True)
class JobAccount:
    """One job's account with Gavel's mechanism, per flavor (``GavelState.flavors`` order).

    Attributes:
        time_s: seconds received on each flavor since the last reset, the 180 s seed included
            (``nan``: never seeded there -- only if the flavor appeared after the job did).
        deficit_s: seconds owed on each flavor, accumulated over every reset.
    """

    time_s: tuple[float, ...]
    deficit_s: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class FifoMemory:
    """Gavel's FIFO policy object: its job → flavor assignment and ``random.Random(seed)``."""

    assigned: Mapping[JobId, GpuFlavor]
    rng: Any


@dataclass(frozen=True, slots=True)
class FtfMemory:
    """Gavel's finish-time fairness policy object: cumulative isolated time ``C`` per job, and
    the remaining steps and isolated throughput seen at the previous recompute."""

    cumulative: Mapping[JobId, float]
    remaining_prev: Mapping[JobId, float]
    iso_prev: Mapping[JobId, float]


@dataclass(frozen=True, slots=True)
class AlloxMemory:
    """Gavel's AlloX policy object: the allocation it returned last time, per job and type."""

    previous: Mapping[JobId, Mapping[GpuFlavor, float]]


@dataclass(frozen=True, slots=True)
class GavelState:
    """Gavel's scheduler state between rounds (a compat policy's memory).

    Attributes:
        flavors: the flavor order of every per-flavor tuple below.
        accounts: one :class:`JobAccount` per active job at the previous call, in job order
            (the keys are also "the jobs known": a change of membership is an event).
        worker_time_s: seconds handed out per flavor since the last reset, seeds included.
        shares: the last computed allocation; ``None`` before the first.
        last_reset_s: when the counters were last reset (0 also means "gate open").
        need_update: an arrival, completion or failed micro-task since the last recompute.
        shuffle_rng: state of Gavel's ``_worker_type_shuffler`` (``random.Random(seed+5)``).
        memory: the policy object's own state.
    """

    flavors: tuple[GpuFlavor, ...]
    accounts: Mapping[JobId, JobAccount]
    worker_time_s: tuple[float, ...]
    shares: Shares | None
    last_reset_s: float
    need_update: bool
    shuffle_rng: Any
    memory: FifoMemory | FtfMemory | AlloxMemory | None = None

    @property
    def known(self) -> tuple[JobId, ...]:
        return tuple(self.accounts)

    def arrays(self, jobs: Sequence[JobId], flavors: Sequence[GpuFlavor], seed_s: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(job_time, deficit, worker_time)`` re-indexed to ``jobs × flavors``.

        New jobs get ``seed_s`` on every flavor and zero deficits; a flavor this state does not
        know gets ``nan`` time for known jobs, zero deficits and zero total (as Gavel's dicts
        would read).
        """
        col = {f: k for k, f in enumerate(self.flavors)}
        src = [col.get(f, -1) for f in flavors]
        m, n = len(jobs), len(flavors)
        time_s = np.full((m, n), seed_s)
        deficit = np.zeros((m, n))
        for i, jid in enumerate(jobs):
            acc = self.accounts.get(jid)
            if acc is None:
                continue
            for k, s in enumerate(src):
                time_s[i, k] = acc.time_s[s] if s >= 0 else math.nan
                deficit[i, k] = acc.deficit_s[s] if s >= 0 else 0.0
        worker = np.array([self.worker_time_s[s] if s >= 0 else 0.0 for s in src])
        return time_s, deficit, worker.reshape(n)


def credit_round(
    state: GavelState,
    credits: Sequence[tuple[JobId, GpuFlavor, float]],
    event: bool,
    drained: bool,
) -> GavelState:
    """Add one round's micro-task times (in the order given, as Gavel's ``_done_callback``)."""
    col = {f: k for k, f in enumerate(state.flavors)}
    accounts = dict(state.accounts)
    worker = list(state.worker_time_s)
    for jid, fl, s in credits:
        k = col.get(fl)
        if k is None:  # a flavor that vanished this round; Gavel would add a dict key
            continue
        acc = accounts.get(jid)
        if acc is not None:
            t = list(acc.time_s)
            t[k] = (0.0 if math.isnan(t[k]) else t[k]) + s
            accounts[jid] = replace(acc, time_s=tuple(t))
        worker[k] += s
    return replace(
        state,
        accounts=accounts,
        worker_time_s=tuple(worker),
        need_update=state.need_update or event,
        last_reset_s=0.0 if drained else state.last_reset_s,
    )
