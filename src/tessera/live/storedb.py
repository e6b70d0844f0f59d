"""The state database's file: one SQLite connection in WAL mode, its tables, and its faults.

:class:`StoreDb` owns what every table shares: the connection and its lock, the schema (created
on first use, and columns added to a state file written before they existed), write
transactions (:meth:`StoreDb.tx`) and reads, and the *fault* state.
:class:`tessera.live.store.Store` builds the tables' operations on it.

The file holds every tenant's jobs and their ``env`` values, so it is created mode 0600 (SQLite
gives its ``-wal`` and ``-shm`` files the same mode) in the private state dir
(:mod:`tessera.live.layout`).

WAL with ``synchronous=NORMAL`` survives a killed process (the case we test: SIGKILL); only an
operating-system crash can lose the last few commits.

A store that fails under the running service -- SQLite finds a damaged page, the file can no
longer be read or written -- is *faulted* (:attr:`StoreDb.fault`): the first such error is logged
once, every later write is refused at once with :class:`StoreDamaged`, and reads go on being
tried (those that touch only sound pages still answer). The service stops deciding and the API
answers 503 (:mod:`tessera.live.api`). What is checked before the store is opened at all is in
:mod:`tessera.live.storecheck`.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tessera.errors import TesseraError
from tessera.live import idempotency, memory, run_energy
from tessera.live.layout import create_private_file

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
    steps REAL NOT NULL DEFAULT 0, settled_s REAL, host_json TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, run));
CREATE INDEX IF NOT EXISTS alloc_status ON allocations(status);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_s REAL NOT NULL, job_id TEXT, kind TEXT NOT NULL,
    from_state TEXT, to_state TEXT, detail TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, seq);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

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


class StoreDb:
    """The connection, its lock and the fault state; thread-safe (one connection, one lock)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        create_private_file(path)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA + memory.SCHEMA + idempotency.SCHEMA + run_energy.SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(allocations)")}
        if "global_batch_samples" not in columns:  # a state file from before elastic jobs
            self._db.execute("ALTER TABLE allocations ADD COLUMN global_batch_samples INTEGER")
        if "colocated_with" not in columns:  # a state file from before co-location
            self._db.execute("ALTER TABLE allocations ADD COLUMN colocated_with TEXT NOT NULL "
                             "DEFAULT ''")
        if "steps" not in columns:  # ... from before runs kept their steps (live.speeds)
            self._db.execute("ALTER TABLE allocations ADD COLUMN steps REAL NOT NULL DEFAULT 0")
            self._db.execute("ALTER TABLE allocations ADD COLUMN settled_s REAL")
        if "host_json" not in columns:  # ... from before runs kept their CPUs and memory
            self._db.execute("ALTER TABLE allocations ADD COLUMN host_json TEXT NOT NULL "
                             "DEFAULT ''")
        if "steps_done" not in {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}:
            self._db.execute("ALTER TABLE jobs ADD COLUMN steps_done REAL")
        self._lock = threading.RLock()
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
                self._rolled_back()
                if isinstance(e, sqlite3.Error):
                    self._check_fault(e)
                raise

    def _rolled_back(self) -> None:
        """Forget what a rolled-back transaction may have counted (a subclass's hook)."""

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
