"""The durable state: one SQLite file in WAL mode.

Tables:

* ``jobs`` -- one row per job: its spec, lifecycle state, counters and last pending reason;
* ``queues`` -- the quota each tenant queue had when the service last started;
* ``allocations`` -- one row per *run* of a job, keyed ``(job_id, run)``: the GPUs the decision
  gave it and the run's status (``planned → running → stopping → done``). It is the idempotent
  launch record: it is written *before* the executor is asked to launch, and the executor names
  what it starts after it, so a restarted service can ask "is run 3 of job j-ab12 alive?" and
  never start that run a second time;
* ``events`` -- append-only log of every state transition and decision, with timestamps;
* ``policy_memory`` -- the policy's memory as of its last decision (:mod:`tessera.live.memory`);
* ``idempotency_keys`` -- the ``Idempotency-Key`` of each keyed submission, written with its job
  (:mod:`tessera.live.idempotency`).

Every job state change goes through :meth:`Store.transition`, which checks the one lifecycle
table (:func:`tessera.model.jobs.transition`) and appends the event in the same transaction, so
the log always accounts for every transition.
The job's spec is stored as JSON generated from its dataclasses (:mod:`tessera.live.jobcodec`;
rows of the first, hand-written format still load). The file, its connection, transactions and
faults are :class:`~tessera.live.storedb.StoreDb`'s (mode 0600, WAL, a *faulted* store refuses
writes with :class:`~tessera.live.storedb.StoreDamaged`); the records read back are
:mod:`tessera.live.records`' (re-exported here).

**Records are lean.** The records :meth:`Store.jobs` and :meth:`Store.get` return carry the
job's spec *without* its ``env`` (``rec.job.env`` is empty): no view shows env, and the
scheduler never needs it, so a listing after a restart, a dashboard poll or a round never pulls
a megabyte of env per job into memory. Only a launch reads env, with :meth:`Store.env`,
uncached. Decoded lean specs are kept in a bounded LRU cache (:mod:`tessera.live.spec_cache`).

**Totals.** :meth:`Store.queue_totals` (jobs and spec bytes stored per queue, kept in memory
once counted), :meth:`Store.count_unfinished` and :meth:`Store.prune_finished` serve the
per-queue caps of :mod:`tessera.live.totals`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tessera.live import idempotency, memory
from tessera.live.jobcodec import StoredJobError
from tessera.live.livejob import LiveJob
from tessera.live.records import (
    HOLDING,
    JOB_COLS,
    Allocation,
    Event,
    JobRecord,
    NewJob,
    allocation_from_row,
    job_record,
)
from tessera.live.spec_cache import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, SpecCache
from tessera.live.storedb import FAULT_CODES, HIGH_WATER_SQL, StoreDamaged, StoreDb
from tessera.model.jobs import JobState, transition
from tessera.sched.core.snapshot import Placement, QueueQuota

__all__ = ["FAULT_CODES", "HIGH_WATER_SQL", "HOLDING", "Allocation", "Event", "JobRecord",
           "NewJob", "Store", "StoreDamaged"]

#: The spec as a lean record carries it: its ``env`` emptied by SQLite, so the values are
#: never copied into Python at all.
_LEAN_SPEC = "json_replace(spec_json, '$.env', json_object())"
#: Most ids in one ``IN (...)`` (well under SQLite's host-parameter limit).
_IN_BATCH = 500


class Store(StoreDb):
    """The service's tables: jobs, queues, allocations, events (thread-safe)."""

    def __init__(self, path: Path, spec_cache_entries: int = DEFAULT_MAX_ENTRIES,
                 spec_cache_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(path)
        self.spec_cache: SpecCache[LiveJob] = SpecCache(spec_cache_entries, spec_cache_bytes)
        self.specs_decoded = 0
        """Specs decoded from their JSON so far (each a cache miss): a measure for tests."""
        self._totals: dict[str, list[int]] = {}  # queue → [jobs, spec bytes], once counted

    def _rolled_back(self) -> None:
        # The queues' running totals may have counted what was rolled back: recount them
        # from the store when next asked.
        self._totals.clear()

    # -- meta and queues ---------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def policy_memory(self, policy: str) -> object:
        """The memory ``policy`` saved with its last decision (see :mod:`tessera.live.memory`)."""
        with self._reading() as db:
            return memory.load(db, policy)

    def sync_queues(self, quotas: dict[str, QueueQuota]) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM queues")
            db.executemany("INSERT INTO queues VALUES (?, ?, ?, ?)", [
                (q.name, q.nominal_gpus, q.borrowing_limit_gpus, q.weight)
                for q in quotas.values()])

    # -- jobs ------------------------------------------------------------------------------------

    def add_job(self, job: LiveJob, now_s: float) -> JobRecord:
        """Insert a new PENDING job and its ``submitted`` event; returns its record."""
        return self.add_jobs([NewJob(job, now_s)])[0]

    def add_jobs(self, new: Sequence[NewJob]) -> list[JobRecord]:
        """Insert new PENDING jobs, their ``submitted`` events and notes, in one transaction.

        This is the group commit behind the API (:mod:`tessera.live.intake`): submissions that
        arrive together share one ``COMMIT``, and none is answered before it, so an accepted
        job is always a stored one. The records returned are the rows as written (what
        :meth:`get` would read back at once), built without reading them back.
        """
        out: list[JobRecord] = []
        with self.tx() as db:
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) FROM jobs").fetchone()[0]
            for n in new:
                s = n.job.spec
                seq += 1
                text = n.job.to_json()
                db.execute(
                    "INSERT INTO jobs (job_id, seq, queue, state, spec_json, submit_time_s,"
                    " pending_since_s, steps_done) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                    (s.job_id, seq, s.queue, JobState.PENDING.value, text, n.now_s, n.now_s))
                self._event(db, n.now_s, s.job_id, "submitted", None, JobState.PENDING,
                            f"{s.num_gpus} GPU(s) on queue {s.queue}")
                if n.note:
                    self._event(db, n.now_s, s.job_id, n.note_kind, None, None, n.note)
                if n.key is not None:
                    idempotency.record(db, n.key, s.job_id, n.now_s)
                self._cache_lean(n.job, text)
                totals = self._totals.get(s.queue)
                if totals is not None:
                    totals[0] += 1
                    totals[1] += len(text)
                out.append(JobRecord(n.job, seq, JobState.PENDING, 0, 0, n.now_s, None, None,
                                     None, 0.0, {}, "", False, None, 0.0))
        return out

    def keyed_job(self, principal: str, key: str, now_s: float) -> tuple[str, str] | None:
        """The job an unexpired ``Idempotency-Key`` of ``principal`` stored, and the digest of
        its request (:func:`tessera.live.idempotency.lookup`)."""
        with self._reading() as db:
            return idempotency.lookup(db, principal, key, now_s)

    def get(self, job_id: str) -> JobRecord | None:
        """The job's record (lean: no ``env``, see the module docstring), or ``None``."""
        with self._reading() as db:
            rows = db.execute(f"SELECT {JOB_COLS} FROM jobs WHERE job_id=?",
                              (job_id,)).fetchall()
            return self._records(rows)[0] if rows else None

    def jobs(self, active_only: bool = False, queue: str | None = None,
             limit: int | None = None, state: str | None = None,
             before_seq: int | None = None) -> list[JobRecord]:
        """Jobs in submission order, lean (no ``env``, see the module docstring).

        Args:
            active_only: leave out final jobs.
            queue: only this queue's jobs.
            limit: only the newest ``limit`` of the jobs that match (still oldest first).
            state: only jobs in this state (a :class:`~tessera.model.jobs.JobState` value).
            before_seq: only jobs submitted before the one with this ``seq`` (a page's cursor).
        """
        where: list[str] = []
        args: list[object] = []
        if active_only:
            where.append("final=0")
        if queue is not None:
            where.append("queue=?")
            args.append(queue)
        if state is not None:
            where.append("state=?")
            args.append(state)
        if before_seq is not None:
            where.append("seq<?")
            args.append(before_seq)
        sql = f"SELECT {JOB_COLS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " DESC LIMIT ?"
            args.append(limit)
        with self._reading() as db:
            out = self._records(db.execute(sql, tuple(args)).fetchall())
        return out[::-1] if limit is not None else out

    def env(self, job_id: str) -> tuple[tuple[str, str], ...]:
        """The job's ``env`` (sorted by name), read for a launch and never cached; ``()`` for
        an unknown job."""
        rows = self._read("SELECT json_extract(spec_json, '$.env') FROM jobs WHERE job_id=?",
                          (job_id,))
        if not rows or rows[0][0] is None:
            return ()
        return tuple(sorted(json.loads(rows[0][0]).items()))

    def _records(self, rows: list[tuple[Any, ...]]) -> list[JobRecord]:
        """Records of ``rows`` (``JOB_COLS``), their specs from the cache or decoded lean
        (the caller holds the lock)."""
        specs: dict[str, LiveJob] = {}
        missing: list[str] = []
        for r in rows:
            job = self.spec_cache.get(r[0])
            if job is None:
                missing.append(r[0])
            else:
                specs[r[0]] = job
        missing = list(dict.fromkeys(missing))
        for i in range(0, len(missing), _IN_BATCH):
            ids = missing[i:i + _IN_BATCH]
            marks = ",".join("?" * len(ids))
            for jid, text in self._db.execute(
                    f"SELECT job_id, {_LEAN_SPEC} FROM jobs WHERE job_id IN ({marks})", ids):
                try:
                    job = specs[jid] = LiveJob.from_json(text)
                except StoredJobError as e:
                    raise StoredJobError(f"job {jid}: {e}") from None
                self.spec_cache.put(jid, job, len(text))
                self.specs_decoded += 1
        return [job_record(r, specs[r[0]]) for r in rows]

    def _cache_lean(self, job: LiveJob, text: str) -> None:
        """Cache a job just stored, without its env (what a decode would give)."""
        if job.env:
            env_chars = sum(len(k) + len(v) + 6 for k, v in job.env)
            job = replace(job, env=())
            self.spec_cache.put(job.spec.job_id, job, max(len(text) - env_chars, 0))
        else:
            self.spec_cache.put(job.spec.job_id, job, len(text))

    # -- totals per queue (tessera.live.totals) ----------------------------------------------

    def queue_totals(self, queue: str) -> tuple[int, int]:
        """Jobs stored in ``queue`` and the bytes of their specs (JSON, env and command
        included). Counted with one query the first time a queue is asked about, then kept up
        to date as jobs are added and pruned."""
        with self._reading() as db:
            totals = self._totals.get(queue)
            if totals is None:
                count, size = db.execute(
                    "SELECT COUNT(*), COALESCE(SUM(length(spec_json)), 0) FROM jobs "
                    "WHERE queue=?", (queue,)).fetchone()
                totals = self._totals[queue] = [int(count), int(size)]
            return totals[0], totals[1]

    def count_unfinished(self, queue: str, most: int | None = None) -> int:
        """Jobs of ``queue`` that are not final (pending, admitted or running), counted up to
        ``most`` at most (a cap's check stops there: the count walks the ``jobs_queue``
        index, about 50 ns a job)."""
        sql = "SELECT 1 FROM jobs WHERE queue=? AND final=0"
        if most is None:
            return int(self._read(f"SELECT COUNT(*) FROM ({sql})", (queue,))[0][0])
        return int(self._read(f"SELECT COUNT(*) FROM ({sql} LIMIT ?)", (queue, most))[0][0])

    def prune_finished(self, queue: str, jobs: int, size_bytes: int, now_s: float,
                       needed: tuple[int, int] = (0, 0)) -> tuple[int, int]:
        """Delete ``queue``'s oldest finished jobs until at least ``jobs`` jobs and
        ``size_bytes`` bytes of specs are gone, or none is left to delete.

        Only a final job none of whose runs still holds GPUs (a cancelled job's run may still
        be draining) is deleted, with its events and allocations; an unfinished job never is.
        One ``pruned`` event (no job) records how many went. Nothing is deleted when all the
        deletable jobs together are fewer than ``needed = (jobs, bytes)``: history is never
        spent on a submission that would be refused anyway.

        Returns:
            the jobs and spec bytes deleted.
        """
        holding = ",".join("?" * len(HOLDING))
        prunable = (f"FROM jobs WHERE queue=? AND final=1 AND job_id NOT IN "
                    f"(SELECT job_id FROM allocations WHERE status IN ({holding}))")
        gone: list[str] = []
        freed = 0
        with self.tx() as db:
            if needed != (0, 0):
                count, size = db.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(length(spec_json)), 0) {prunable}",
                    (queue, *HOLDING)).fetchone()
                if int(count) < needed[0] or int(size) < needed[1]:
                    return 0, 0
            # Stepped one row at a time: SQLite measures only the specs of the jobs taken.
            rows = db.execute(f"SELECT job_id, length(spec_json) {prunable} ORDER BY seq",
                              (queue, *HOLDING))
            while len(gone) < jobs or freed < size_bytes:
                row = rows.fetchone()
                if row is None:
                    break
                gone.append(row[0])
                freed += int(row[1])
            rows.close()
            for table in ("jobs", "events", "allocations", "idempotency_keys", "run_energy"):
                db.executemany(f"DELETE FROM {table} WHERE job_id=?", [(j,) for j in gone])
            if gone:
                self._event(db, now_s, None, "pruned", None, None,
                            f"queue {queue}: {len(gone)} finished job(s), {freed} bytes, "
                            "deleted to make room (stored-job caps)")
            for jid in gone:
                self.spec_cache.discard(jid)
            totals = self._totals.get(queue)
            if totals is not None:
                totals[0] -= len(gone)
                totals[1] -= freed
        return len(gone), freed

    def count_jobs(self, queue: str | None = None) -> dict[str, int]:
        """Jobs per state, of one queue or of all."""
        if queue is None:
            rows = self._read("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        else:
            rows = self._read("SELECT state, COUNT(*) FROM jobs WHERE queue=? GROUP BY state",
                              (queue,))
        return {str(k): int(v) for k, v in rows}

    def transition(self, db: sqlite3.Connection, job_id: str, new: JobState, now_s: float,
                   detail: str = "", **updates: object) -> JobState:
        """Move a job to ``new`` inside transaction ``db`` (checked by the lifecycle table).

        ``updates`` sets further columns of the job row in the same statement.

        Raises:
            InvalidTransition: when the lifecycle table does not allow the move.
        """
        row = db.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        old = JobState(row[0])
        transition(old, new)
        cols = {"state": new.value, **updates}
        sets = ", ".join(f"{k}=?" for k in cols)
        db.execute(f"UPDATE jobs SET {sets} WHERE job_id=?", (*cols.values(), job_id))
        self._event(db, now_s, job_id, "transition", old, new, detail)
        return old

    def update_job(self, db: sqlite3.Connection, job_id: str, **cols: object) -> None:
        sets = ", ".join(f"{k}=?" for k in cols)
        db.execute(f"UPDATE jobs SET {sets} WHERE job_id=?", (*cols.values(), job_id))

    def set_reasons(self, reasons: dict[str, str]) -> None:
        """Record why each job waits (not an event: reasons change every round)."""
        if reasons:
            with self.tx() as db:
                db.executemany("UPDATE jobs SET reason=? WHERE job_id=? AND reason<>?",
                               [(r, j, r) for j, r in reasons.items()])

    # -- allocations -------------------------------------------------------------------------

    def add_allocation(self, db: sqlite3.Connection, job_id: str, run: int, p: Placement,
                       now_s: float) -> None:
        db.execute(
            "INSERT INTO allocations (job_id, run, flavor, gpus_json, status, created_s,"
            " global_batch_samples, colocated_with, host_json)"
            " VALUES (?, ?, ?, ?, 'planned', ?, ?, ?, ?)",
            (job_id, run, p.label,
             json.dumps([(n, c, f.short) for n, c, f in p.parts()] if p.is_mixed
                        else p.gpus_by_node),
             now_s, p.global_batch_samples, ",".join(p.colocated_with),
             json.dumps(p.host_by_node) if p.host_by_node else ""))

    def set_allocation(self, db: sqlite3.Connection, job_id: str, run: int, **cols: object) -> None:
        sets = ", ".join(f"{k}=?" for k in cols)
        db.execute(f"UPDATE allocations SET {sets} WHERE job_id=? AND run=?",
                   (*cols.values(), job_id, run))

    def allocations(self, statuses: tuple[str, ...] = HOLDING,
                    job_id: str | None = None) -> list[Allocation]:
        marks = ",".join("?" * len(statuses))
        sql = f"SELECT *, rowid FROM allocations WHERE status IN ({marks})"
        args: tuple[object, ...] = statuses
        if job_id is not None:
            sql += " AND job_id=?"
            args = (*statuses, job_id)
        rows = self._read(sql + " ORDER BY created_s, job_id", args)
        return [allocation_from_row(r) for r in rows]

    def allocation(self, job_id: str, run: int) -> Allocation | None:
        rows = self._read("SELECT *, rowid FROM allocations WHERE job_id=? AND run=?",
                          (job_id, run))
        return allocation_from_row(rows[0]) if rows else None

    # -- events ------------------------------------------------------------------------------

    def event(self, db: sqlite3.Connection, now_s: float, job_id: str | None, kind: str,
              detail: str = "") -> None:
        """Append a non-transition event (a decision, a launch, a stop request ...)."""
        self._event(db, now_s, job_id, kind, None, None, detail)

    @staticmethod
    def _event(db: sqlite3.Connection, now_s: float, job_id: str | None, kind: str,
               old: JobState | None, new: JobState | None, detail: str) -> None:
        db.execute(
            "INSERT INTO events (ts_s, job_id, kind, from_state, to_state, detail)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (now_s, job_id, kind, old.value if old else None, new.value if new else None, detail))

    def events(self, job_id: str | None = None, after_seq: int = 0) -> list[Event]:
        sql = "SELECT * FROM events WHERE seq>?"
        args: tuple[object, ...] = (after_seq,)
        if job_id is not None:
            sql += " AND job_id=?"
            args = (after_seq, job_id)
        return [Event(*r) for r in self._read(sql + " ORDER BY seq", args)]
