"""The job store is never silently replaced: what ``tessera serve`` checks before it opens it.

SQLite opens whatever it finds: a ``state.db`` that was deleted or truncated to nothing becomes
a new, empty store, and the service would start with no jobs as if it never had any. So the
service keeps a **marker** beside the store, ``store.marker`` (``0600``, replaced
atomically), that names

* the store's **identity**: a random id, also kept in the store's ``meta`` table (key
  ``store_id``), so a store swapped for another one is told apart;
* its **job count** as last known: how many jobs it ever took (:meth:`Store.job_high_water
  <tessera.live.store.Store.job_high_water>`; also kept in ``meta``, so removing old jobs
  never lowers it). :class:`MarkerKeeper` rewrites it every
  :data:`MARKER_PERIOD_S` while it changes -- after a WAL checkpoint, so the marker never
  counts a job that an operating-system crash could still take back -- and at a clean stop.

:func:`open_store` then refuses to start, in one line that says what is wrong and how to
proceed, on

* a missing ``state.db`` while the marker exists (or its ``-wal`` is left without it);
* an empty (0 bytes), truncated (shorter than its header says) or bad-header file;
* a read-only or unreadable file;
* a store that fails ``PRAGMA integrity_check``;
* a store whose identity is not the marker's, or that holds fewer jobs than the marker counts.

``tessera serve --new-store`` starts afresh on purpose: it moves the store's files (and the
marker) aside into ``store-aside-<UTC time>/`` in the state dir -- never deleting them -- and
starts with an empty store. A first start on an empty state dir just creates the store and
its marker; a store from before markers existed is adopted (given an identity) on its first
start.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import struct
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tessera.errors import SpecError
from tessera.live.layout import MARKER_NAME, write_private
from tessera.live.store import HIGH_WATER_SQL, Store

log = logging.getLogger("tessera.live.storecheck")

#: How often a running service brings the marker's job count up to date (s), when it changed.
MARKER_PERIOD_S = 2.0
SQLITE_MAGIC = b"SQLite format 3\x00"
ASIDE_PREFIX = "store-aside-"


class StoreRefused(SpecError):
    """The store is not the one the service left; the message says what is wrong and what to
    do (one line)."""


@dataclass(frozen=True, slots=True)
class Marker:
    """What ``store.marker`` says: which store, and how many jobs it held."""

    store_id: str
    jobs: int
    updated_s: float


def marker_path(db_path: Path) -> Path:
    return db_path.with_name(MARKER_NAME)


def companions(db_path: Path) -> tuple[Path, Path]:
    """The store's write-ahead log and shared-memory index."""
    return db_path.with_name(db_path.name + "-wal"), db_path.with_name(db_path.name + "-shm")


def read_marker(db_path: Path) -> Marker | None:
    """The marker beside ``db_path`` (``None``: there is none).

    Raises:
        StoreRefused: it cannot be read or is not a marker.
    """
    path = marker_path(db_path)
    try:
        raw = json.loads(path.read_text())
        return Marker(str(raw["store_id"]), int(raw["jobs"]), float(raw.get("updated_s", 0)))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreRefused(f"refusing to start: cannot read {path} ({e.strerror})") from None
    except (ValueError, KeyError, TypeError):
        raise StoreRefused(f"refusing to start: {path} is not a store marker; if {db_path} is "
                           "the store you mean to keep, move the marker away (the next start "
                           "writes a new one)") from None


def write_marker(db_path: Path, store_id: str, jobs: int) -> None:
    """Replace the marker atomically (mode 0600)."""
    text = json.dumps({"store_id": store_id, "jobs": jobs, "updated_s": round(time.time(), 3)})
    write_private(marker_path(db_path), text + "\n")


def how_to_proceed(state_dir: Path) -> str:
    return (f"restore a backup (tessera admin restore --state {state_dir} BACKUP) or start "
            "afresh with tessera serve --new-store (it moves the old files aside)")


def move_aside(db_path: Path) -> Path | None:
    """Move the store's files and its marker into a new ``store-aside-<UTC time>/`` folder
    (``0700``) in the state dir; the folder, or ``None`` when there was nothing to move."""
    present = [p for p in (db_path, *companions(db_path), marker_path(db_path)) if p.exists()]
    if not present:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = db_path.parent / f"{ASIDE_PREFIX}{stamp}"
    n = 1
    while aside.exists():
        n += 1
        aside = db_path.parent / f"{ASIDE_PREFIX}{stamp}-{n}"
    aside.mkdir(mode=0o700)
    for p in present:
        p.rename(aside / p.name)
    return aside


def file_problem(db_path: Path, marker: Marker | None) -> str | None:
    """What is wrong with the store's files, seen without SQLite (``None``: nothing, or no
    store yet on a first start)."""
    wal, _ = companions(db_path)
    held = (f", but {marker_path(db_path)} says it held {marker.jobs} job(s)"
            if marker is not None else "")
    if not db_path.exists():
        if marker is not None:
            return f"the job store {db_path} is missing{held}"
        if wal.exists():
            return f"the job store {db_path} is missing but its write-ahead log {wal} is there"
        return None
    st = db_path.stat()
    if st.st_size == 0:
        return f"the job store {db_path} is empty (0 bytes){held}"
    if not st.st_mode & 0o200 or not os.access(db_path, os.R_OK | os.W_OK):
        return (f"the job store {db_path} is read-only or unreadable for the service's user "
                f"(mode {st.st_mode & 0o777:04o}); run: chmod 600 {db_path}")
    if not os.access(db_path.parent, os.W_OK):
        return (f"the state dir {db_path.parent} is read-only for the service's user, which "
                f"must write the store's log beside it; run: chmod 700 {db_path.parent}")
    with db_path.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or header[:16] != SQLITE_MAGIC:
        return f"the job store {db_path} is not an SQLite database (bad header)"
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    pages, counter, valid_for = (struct.unpack(">I", header[i:i + 4])[0] for i in (28, 24, 92))
    expected = pages * page_size if pages and counter == valid_for else 0
    if st.st_size < expected:
        return (f"the job store {db_path} is truncated ({st.st_size} bytes; its header says "
                f"{expected} bytes)")
    if st.st_size % max(page_size, 1):
        return (f"the job store {db_path} is truncated ({st.st_size} bytes, not a whole "
                f"number of {page_size}-byte pages)")
    return None


def content_problem(db_path: Path, marker: Marker | None, full_check: bool = True) -> str | None:
    """What is wrong inside the store (``None``: nothing): SQLite's integrity check (or its
    quicker ``quick_check``), then the identity and the job count against the marker."""
    uri = "file:" + urllib.parse.quote(str(db_path)) + "?mode=rw"
    try:
        db = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as e:
        return f"the job store {db_path} cannot be opened ({e})"
    try:
        db.execute("PRAGMA busy_timeout=5000")
        pragma = "integrity_check" if full_check else "quick_check"
        try:
            found = [str(r[0]) for r in db.execute(f"PRAGMA {pragma}").fetchall()]
        except sqlite3.DatabaseError as e:  # damaged where the check itself must read
            found = [str(e)]
        if found != ["ok"]:
            more = f", and {len(found) - 1} more" if len(found) > 1 else ""
            return f"the job store {db_path} is damaged ({pragma}: {found[0]}{more})"
        db.execute("BEGIN IMMEDIATE")  # can the service write it? (nothing is written)
        db.execute("ROLLBACK")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        store_id = None
        if "meta" in tables:
            row = db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
            store_id = row[0] if row else None
        jobs = (db.execute(f"SELECT {HIGH_WATER_SQL}").fetchone()[0]
                if {"jobs", "meta"} <= tables else 0)
    except sqlite3.Error as e:
        return f"the job store {db_path} cannot be used ({e})"
    finally:
        db.close()
    if marker is None:
        return None
    if store_id != marker.store_id:
        return (f"the job store {db_path} is not the one this service kept (its id is "
                f"{store_id or 'missing'}, {marker_path(db_path)} names {marker.store_id})")
    if jobs < marker.jobs:
        return (f"the job store {db_path} holds {jobs} job(s) but the service had stored "
                f"{marker.jobs} ({marker_path(db_path)}): it was truncated or replaced by an "
                "older copy")
    return None


def open_store(db_path: Path, new_store: bool = False, full_check: bool = True,
               say: Callable[[str], None] = print) -> Store:
    """Check the store against its marker and open it (see the module docstring).

    Call it holding the state dir's ``serve.lock``. ``new_store`` first moves the old files
    aside and says where (``say``); ``full_check``: ``integrity_check`` rather than
    ``quick_check``.

    Raises:
        StoreRefused: one line: what is wrong, and how to proceed.
    """
    state_dir = db_path.parent
    if new_store:
        aside = move_aside(db_path)
        if aside is not None:
            say(f"--new-store: moved the old job store to {aside}; starting with an empty one")
    marker = read_marker(db_path)
    problem = file_problem(db_path, marker)
    if problem is None and db_path.exists():
        problem = content_problem(db_path, marker, full_check)
    if problem is not None:
        fix = "" if "run: chmod" in problem else f"; {how_to_proceed(state_dir)}"
        raise StoreRefused(f"refusing to start: {problem}{fix}")
    try:
        store = Store(db_path)
    except sqlite3.Error as e:
        raise StoreRefused(f"refusing to start: the job store {db_path} cannot be opened ({e})"
                           f"; {how_to_proceed(state_dir)}") from None
    try:
        store_id = store.meta("store_id")
        if store_id is None:  # a new store, or one from before markers: give it its identity
            store_id = os.urandom(12).hex()
            store.set_meta("store_id", store_id)
        write_marker(db_path, store_id, store.job_high_water())
    except BaseException:
        store.close()
        raise
    return store


class MarkerKeeper:
    """Keeps the marker's job count current while the service runs, and watches the file.

    :meth:`tick` is called by the scheduling loop; every :data:`MARKER_PERIOD_S` it checks
    that ``state.db`` is still the file the service opened (deleted, replaced or truncated to
    nothing faults the store: the service would otherwise go on writing into a file nobody
    will find) and, if jobs were added since, checkpoints the WAL and rewrites the marker.
    """

    def __init__(self, store: Store, period_s: float = MARKER_PERIOD_S) -> None:
        self.store = store
        self.period_s = period_s
        st = store.path.stat()
        self._file = (st.st_dev, st.st_ino)
        self._store_id = store.meta("store_id") or ""
        self._jobs = store.job_high_water()
        self._last_s = 0.0
        # Checkpoints go through a connection of their own: SQLite lets them run beside the
        # store's writes, so API requests never wait on the store's lock for one.
        self._checkpoints: sqlite3.Connection | None = None

    def tick(self, now_s: float) -> None:
        """Check the file and update the marker, at most every ``period_s``."""
        if now_s - self._last_s < self.period_s or self.store.fault is not None:
            return
        self._last_s = now_s
        if self.check_file():
            self.update()

    def check_file(self) -> bool:
        """Whether ``state.db`` is still the file the service opened; faults the store if
        not."""
        path = self.store.path
        try:
            st = path.stat()
        except FileNotFoundError:
            self.store.mark_faulted(f"{path} was deleted while the service ran")
            return False
        if (st.st_dev, st.st_ino) != self._file:
            self.store.mark_faulted(f"{path} was replaced while the service ran")
        elif st.st_size == 0:
            self.store.mark_faulted(f"{path} was truncated to 0 bytes while the service ran")
        return self.store.fault is None

    def update(self) -> None:
        """Rewrite the marker if the job count changed (after a checkpoint)."""
        jobs = self.store.job_high_water()
        if jobs == self._jobs or not self._store_id:
            return
        self.store.set_meta("jobs_high_water", str(jobs))  # the store remembers it too
        try:
            if self._checkpoints is None:
                self._checkpoints = sqlite3.connect(self.store.path, check_same_thread=False)
                self._checkpoints.execute("PRAGMA busy_timeout=5000")
            busy, frames, copied = self._checkpoints.execute(
                "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if busy or copied < frames:  # part of the WAL is not on disk yet: next time
                return
            write_marker(self.store.path, self._store_id, jobs)
        except (OSError, sqlite3.Error) as e:
            log.warning("cannot update %s: %s", marker_path(self.store.path), e)
            return
        self._jobs = jobs

    def close(self) -> None:
        """At a clean stop: a last update, unless the store is faulted."""
        try:
            if self.store.fault is None and self.check_file():
                self.update()
        finally:
            if self._checkpoints is not None:
                self._checkpoints.close()
                self._checkpoints = None
