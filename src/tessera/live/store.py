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

The file holds every tenant's jobs and their ``env`` values, so it is created mode 0600 (SQLite
gives its ``-wal`` and ``-shm`` files the same mode) in the private state dir
(:mod:`tessera.live.layout`).

**Records are lean.** The records :meth:`Store.jobs` and :meth:`Store.get` return carry the
job's spec *without* its ``env`` (``rec.job.env`` is empty): no view shows env, and the
scheduler never needs it, so a listing after a restart, a dashboard poll or a round never pulls
a megabyte of env per job into memory. Only a launch reads env, with :meth:`Store.env`,
uncached. Decoded lean specs are kept in a bounded LRU cache (:mod:`tessera.live.spec_cache`).

**Totals.** :meth:`Store.queue_totals` (jobs and spec bytes stored per queue, kept in memory
once counted), :meth:`Store.count_unfinished` and :meth:`Store.prune_finished` serve the
per-queue caps of :mod:`tessera.live.totals`.

WAL with ``synchronous=NORMAL`` survives a killed process (the case we test: SIGKILL); only an
operating-system crash can lose the last few commits.

A store that fails under the running service -- SQLite finds a damaged page, the file can no
longer be read or written -- is *faulted* (:attr:`Store.fault`): the first such error is logged
once, every later write is refused at once with :class:`StoreDamaged`, and reads go on being
tried (those that touch only sound pages still answer). The service stops deciding and the API
answers 503 (:mod:`tessera.live.api`). What is checked before the store is opened at all is in
:mod:`tessera.live.storecheck`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tessera.errors import TesseraError
from tessera.live import idempotency, memory
from tessera.live.layout import create_private_file
from tessera.live.spec import LiveJob
from tessera.live.spec_cache import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, SpecCache
from tessera.model.jobs import JobId, JobState, transition
from tessera.sched.core.snapshot import Placement, QueueQuota

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, queue TEXT NOT NULL, state TEXT NOT NULL,
    spec_json TEXT NOT NULL, submit_time_s REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    runs INTEGER NOT NULL DEFAULT 0, pending_since_s REAL NOT NULL, last_run_end_s REAL,
    first_start_s REAL, finish_s REAL, attained_gpu_s REAL NOT NULL DEFAULT 0,
    run_s_json TEXT NOT NULL DEFAULT '{}', reason TEXT NOT NULL DEFAULT '',
    final INTEGER NOT NULL DEFAULT 0, exit_code INTEGER, steps_done REAL);
CREATE INDEX IF NOT EXISTS jobs_active ON jobs(final, seq);
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs(seq);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(queue, final, seq);
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY, nominal_gpus INTEGER NOT NULL, borrowing_limit_gpus INTEGER,
    weight REAL NOT NULL);
CREATE TABLE IF NOT EXISTS allocations (
    job_id TEXT NOT NULL, run INTEGER NOT NULL, flavor TEXT NOT NULL, gpus_json TEXT NOT NULL,
    status TEXT NOT NULL, stop_reason TEXT, created_s REAL NOT NULL, started_s REAL,
    ended_s REAL, exit_code INTEGER, detail TEXT NOT NULL DEFAULT '',
    global_batch_samples INTEGER, colocated_with TEXT NOT NULL DEFAULT '',
    steps REAL NOT NULL DEFAULT 0, settled_s REAL, PRIMARY KEY (job_id, run));
CREATE INDEX IF NOT EXISTS alloc_status ON allocations(status);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_s REAL NOT NULL, job_id TEXT, kind TEXT NOT NULL,
    from_state TEXT, to_state TEXT, detail TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, seq);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

#: Allocation statuses in which the run holds its GPUs.
HOLDING = ("planned", "running", "stopping")

log = logging.getLogger("tessera.live.store")

#: SQLite's primary result codes that mean the file itself is damaged or can no longer be
#: used (not a busy lock or a full disk, which pass): the store is faulted on the first one.
FAULT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_IOERR,
                         sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN})


#: The store's job count as :meth:`Store.job_high_water` defines it, as one SQL expression.
HIGH_WATER_SQL = ("MAX((SELECT COALESCE(MAX(seq), 0) FROM jobs), (SELECT COALESCE(MAX(CAST("
                  "value AS INTEGER)), 0) FROM meta WHERE key='jobs_high_water'))")


class StoreDamaged(TesseraError):
    """The job store failed under the running service: writes are refused from then on (the
    API answers 503 with this message)."""


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
    run_s_by_flavor: dict[str, float]
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
_JOB_COLS = ("job_id, seq, state, attempts, runs, pending_since_s, last_run_end_s, "
             "first_start_s, finish_s, attained_gpu_s, run_s_json, reason, final, exit_code, "
             "steps_done")
#: The spec as a lean record carries it: its ``env`` emptied by SQLite, so the values are
#: never copied into Python at all.
_LEAN_SPEC = "json_replace(spec_json, '$.env', json_object())"
#: Most ids in one ``IN (...)`` (well under SQLite's host-parameter limit).
_IN_BATCH = 500


def _job(row: tuple[Any, ...], job: LiveJob) -> JobRecord:
    return JobRecord(job, row[1], JobState(row[2]), row[3], row[4], row[5],
                     row[6], row[7], row[8], row[9], json.loads(row[10]), row[11], bool(row[12]),
                     row[13], row[14])


def _alloc(row: tuple[Any, ...]) -> Allocation:
    """An allocation row; a mixed gang's ``gpus_json`` lists ``[node, gpus, flavor]`` triples."""
    entries = json.loads(row[3])
    # The global batch an elastic job's run was planned at; the jobs sharing its GPUs.
    batch = int(row[11]) if row[11] is not None else None
    mates = tuple(JobId(j) for j in row[12].split(",")) if row[12] else ()
    if entries and len(entries[0]) == 3:
        p = Placement.mixed(tuple((n, f, int(c)) for n, c, f in entries))
        if batch is not None or mates:
            p = replace(p, global_batch_samples=batch, colocated_with=mates)
    else:
        p = Placement(row[2], tuple((n, int(c)) for n, c in entries), (), batch, mates)
    return Allocation(row[0], row[1], p, row[4], row[5], row[6], row[7], row[8], row[9], row[10],
                      row[13], row[14], row[15])


class Store:
    """Thread-safe access to the state database (one connection, one lock)."""

    def __init__(self, path: Path, spec_cache_entries: int = DEFAULT_MAX_ENTRIES,
                 spec_cache_bytes: int = DEFAULT_MAX_BYTES) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        create_private_file(path)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA + memory.SCHEMA + idempotency.SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(allocations)")}
        if "global_batch_samples" not in columns:  # a state file from before elastic jobs
            self._db.execute("ALTER TABLE allocations ADD COLUMN global_batch_samples INTEGER")
        if "colocated_with" not in columns:  # a state file from before co-location
            self._db.execute("ALTER TABLE allocations ADD COLUMN colocated_with TEXT NOT NULL "
                             "DEFAULT ''")
        if "steps" not in columns:  # ... from before runs kept their steps (live.speeds)
            self._db.execute("ALTER TABLE allocations ADD COLUMN steps REAL NOT NULL DEFAULT 0")
            self._db.execute("ALTER TABLE allocations ADD COLUMN settled_s REAL")
        if "steps_done" not in {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}:
            self._db.execute("ALTER TABLE jobs ADD COLUMN steps_done REAL")
        self._lock = threading.RLock()
        self.spec_cache: SpecCache[LiveJob] = SpecCache(spec_cache_entries, spec_cache_bytes)
        self.specs_decoded = 0
        """Specs decoded from their JSON so far (each a cache miss): a measure for tests."""
        self._totals: dict[str, list[int]] = {}  # queue → [jobs, spec bytes], once counted
        self.fault: str | None = None
        """Why the store failed under the service (``None``: it has not); see the module
        docstring."""

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- faults ------------------------------------------------------------------------------

    def mark_faulted(self, why: str) -> None:
        """Fault the store (once: the first reason stays) and log it, in one line."""
        with self._lock:
            if self.fault is not None:
                return
            self.fault = why
        log.error("%s", self.fault_message())

    def fault_message(self) -> str:
        """What a client or the log is told while the store is faulted (one line)."""
        state = self.path.parent
        return (f"the job store {self.path} failed ({self.fault}): the service has stopped "
                "deciding and refuses writes; reads are served where they can be. Stop the "
                f"service, then restore a backup (tessera admin restore --state {state} "
                "BACKUP) or start afresh (tessera serve --new-store moves the old files aside)")

    def _check_fault(self, e: sqlite3.Error) -> None:
        """Raise :class:`StoreDamaged` (faulting the store) if ``e`` is a fault."""
        code = getattr(e, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in FAULT_CODES:
            self.mark_faulted(f"{e}, {getattr(e, 'sqlite_errorname', code)}")
            raise StoreDamaged(self.fault_message()) from e

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: everything inside commits together or not at all.

        Raises:
            StoreDamaged: the store is faulted (nothing is tried), or this write faults it.
        """
        with self._lock:
            if self.fault is not None:
                raise StoreDamaged(self.fault_message())
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                self._check_fault(e)
                raise
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as e:
                if self._db.in_transaction:  # the error that brought us here is the one told
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                # The queues' running totals may have counted what was rolled back: recount
                # them from the store when next asked.
                self._totals.clear()
                if isinstance(e, sqlite3.Error):
                    self._check_fault(e)
                raise

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._reading() as db:
            return db.execute(sql, args).fetchall()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, for reads: a fault met while reading faults the
        store (:class:`StoreDamaged`), as a write's would."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as e:
                self._check_fault(e)
                raise

    # -- what the start checks and the marker need (tessera.live.storecheck) ----------------

    def job_high_water(self) -> int:
        """How many jobs the store ever took: the highest job number stored (jobs are numbered
        1, 2, ... in submission order), or the count last recorded in ``meta`` if higher (so
        a job removed later does not lower it)."""
        return int(self._read(f"SELECT {HIGH_WATER_SQL}")[0][0])

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
            rows = db.execute(f"SELECT {_JOB_COLS} FROM jobs WHERE job_id=?",
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
        sql = f"SELECT {_JOB_COLS} FROM jobs"
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
        """Records of ``rows`` (``_JOB_COLS``), their specs from the cache or decoded lean
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
                job = specs[jid] = LiveJob.from_json(text)
                self.spec_cache.put(jid, job, len(text))
                self.specs_decoded += 1
        return [_job(r, specs[r[0]]) for r in rows]

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
            for table in ("jobs", "events", "allocations", "idempotency_keys"):
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
            " global_batch_samples, colocated_with) VALUES (?, ?, ?, ?, 'planned', ?, ?, ?)",
            (job_id, run, p.flavor, json.dumps(p.parts() if p.is_mixed else p.gpus_by_node),
             now_s, p.global_batch_samples, ",".join(p.colocated_with)))

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
        return [_alloc(r) for r in self._read(sql + " ORDER BY created_s, job_id", args)]

    def allocation(self, job_id: str, run: int) -> Allocation | None:
        rows = self._read("SELECT *, rowid FROM allocations WHERE job_id=? AND run=?",
                          (job_id, run))
        return _alloc(rows[0]) if rows else None

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
