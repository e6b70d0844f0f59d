"""The records the store reads back: a job's row, a run's allocation, an event.

A :class:`JobRecord` is one row of ``jobs`` decoded, its :class:`~tessera.live.livejob.LiveJob`
lean (no ``env``: :mod:`tessera.live.store`); an :class:`Allocation` is one run of a job, with
its :class:`~tessera.sched.core.snapshot.Placement`; an :class:`Event` one line of the log. The
functions below turn SQLite rows into them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from tessera.live import idempotency
from tessera.live.livejob import LiveJob
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.snapshot import Placement

#: Allocation statuses in which the run holds its GPUs.
HOLDING = ("planned", "running", "stopping")


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One row of ``jobs``, decoded."""

    job: LiveJob
    seq: int
    state: JobState
    attempts: int
    runs: int
    pending_since_s: float
    last_run_end_s: float | None
    first_start_s: float | None
    finish_s: float | None
    attained_gpu_s: float
    run_s_by_flavor: dict[GpuFlavor, float]
    reason: str
    final: bool
    exit_code: int | None
    steps_done: float | None = None
    """Steps of the runs that ended (:mod:`tessera.live.speeds`); ``None`` for a job stored
    before runs kept their steps."""

    @property
    def job_id(self) -> str:
        return self.job.spec.job_id

    @property
    def queue(self) -> str:
        return self.job.spec.queue


@dataclass(frozen=True, slots=True)
class Allocation:
    """One run of a job: where it was placed and how far it got."""

    job_id: str
    run: int
    placement: Placement
    status: str
    stop_reason: str | None
    created_s: float
    started_s: float | None
    ended_s: float | None
    exit_code: int | None
    detail: str
    steps: float = 0.0
    """Steps the run made up to ``settled_s`` (:mod:`tessera.live.speeds`)."""
    settled_s: float | None = None
    """When the run's speed last changed (a partner came or went); ``None``: never."""
    seq: int = 0
    """Write order among allocations (SQLite's rowid): a decision writes a pair's host run
    before its partner's, at the same ``created_s``."""


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job about to be stored: the job, when it was submitted, and an optional note event
    (``note_kind``, e.g. ``rigid``: why an elastic request runs rigid) stored with it, and the
    ``Idempotency-Key`` it was submitted with, if any (stored in the same transaction)."""

    job: LiveJob
    now_s: float
    note: str = ""
    note_kind: str = "rigid"
    key: idempotency.KeyUse | None = None


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    ts_s: float
    job_id: str | None
    kind: str
    from_state: str | None
    to_state: str | None
    detail: str


#: A job row's columns but its spec (``job_id`` first: the spec comes from the cache).
JOB_COLS = ("job_id, seq, state, attempts, runs, pending_since_s, last_run_end_s, "
             "first_start_s, finish_s, attained_gpu_s, run_s_json, reason, final, exit_code, "
             "steps_done")


def job_record(row: tuple[Any, ...], job: LiveJob) -> JobRecord:
    """A ``jobs`` row read with :data:`JOB_COLS`, its spec decoded (or cached) as ``job``."""
    return JobRecord(job, row[1], JobState(row[2]), row[3], row[4], row[5],
                     row[6], row[7], row[8], row[9],
                     {resolve_flavor(f): s for f, s in json.loads(row[10]).items()}, row[11],
                     bool(row[12]),
                     row[13], row[14])


def allocation_from_row(row: tuple[Any, ...]) -> Allocation:
    """An allocation row; a mixed gang's ``gpus_json`` lists ``[node, gpus, flavor]`` triples,
    and ``host_json`` the ``[node, cpus, mem_gib]`` a resource-aware policy gave the run."""
    entries = json.loads(row[3])
    # The global batch an elastic job's run was planned at; the jobs sharing its GPUs.
    batch = int(row[11]) if row[11] is not None else None
    mates = tuple(JobId(j) for j in row[12].split(",")) if row[12] else ()
    if entries and len(entries[0]) == 3:
        p = Placement.mixed(tuple((n, resolve_flavor(f), int(c)) for n, c, f in entries))
        if batch is not None or mates:
            p = replace(p, global_batch_samples=batch, colocated_with=mates)
    else:
        p = Placement.of(resolve_flavor(row[2]), tuple((n, int(c)) for n, c in entries),
                         global_batch_samples=batch, colocated_with=mates)
    if row[15]:  # CPUs and memory a resource-aware policy chose per node
        p = replace(p, host_by_node=tuple((str(n), float(c), float(m))
                                          for n, c, m in json.loads(row[15])))
    return Allocation(row[0], row[1], p, row[4], row[5], row[6], row[7], row[8], row[9], row[10],
                      row[13], row[14], row[16])

