"""Backups of the job store: ``tessera admin backup`` and ``tessera admin restore``.

A **backup** copies ``state.db`` with SQLite's online backup API in one step: the copy is one
consistent snapshot (a read transaction on the store), taken while the service goes on
writing -- in WAL mode a reader never blocks the writer. The copy is written to a ``.partial``
file created ``0600`` (it holds every tenant's jobs and ``env`` values), switched to a
single-file journal, checked with ``PRAGMA integrity_check``, synced, and only then renamed
to the name asked for; an existing file is never overwritten.

A **restore** takes the state dir's ``serve.lock`` first (so it refuses while a service runs,
and no service can start during it), checks the backup (an SQLite file that passes
``integrity_check`` and is a Tessera store), moves the current store and its marker aside
(``store-aside-<UTC time>/``, like ``serve --new-store``: nothing is deleted), copies the
backup into place and rewrites the marker for it. The next ``tessera serve`` starts on the
restored jobs; runs the backup still lists as running are asked for and, if gone, retried
(:mod:`tessera.live.reconcile`).

The tenancy file ``tessera-live.yaml`` (queues, token hashes) is not in the store: copy it
with the backup (``cp -p``), it is small and changes only by hand or ``token-add``.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from tessera.errors import SpecError
from tessera.live.layout import DB_NAME, STATE_DIR_MODE, StateLock, check_private
from tessera.live.store import HIGH_WATER_SQL
from tessera.live.storecheck import (
    SQLITE_MAGIC,
    companions,
    marker_path,
    move_aside,
    write_marker,
)


@dataclass(frozen=True, slots=True)
class Copied:
    """What a backup or a restore copied."""

    path: Path
    jobs: int
    size_bytes: int
    store_id: str
    aside: Path | None = None
    """Where a restore moved the store it replaced (``None``: there was none)."""


def _uri(path: Path, mode: str) -> str:
    return "file:" + urllib.parse.quote(str(path)) + f"?mode={mode}"


def _summary(db: sqlite3.Connection, what: Path) -> tuple[int, str]:
    """The copy's job count and store id, after ``integrity_check``.

    Raises:
        SpecError: it fails the check or is not a Tessera store.
    """
    try:
        found = [str(r[0]) for r in db.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.DatabaseError as e:  # damaged where the check itself must read
        found = [str(e)]
    if found != ["ok"]:
        raise SpecError(f"{what} is damaged (integrity_check: {found[0]})")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"jobs", "meta"} <= tables:
        raise SpecError(f"{what} is an SQLite file but not a Tessera job store")
    jobs = int(db.execute(f"SELECT {HIGH_WATER_SQL}").fetchone()[0])
    row = db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
    return jobs, row[0] if row else ""


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(state_dir: Path, out: Path) -> Copied:
    """Copy the store of ``state_dir`` to ``out`` (while a service runs or not).

    Raises:
        SpecError: no store there, an unsafe state dir, ``out`` exists, or the copy fails
            its integrity check (then nothing is left at ``out``).
    """
    db_path = state_dir / DB_NAME
    if not db_path.is_file():
        raise SpecError(f"no job store at {db_path}; check --state")
    check_private(state_dir)
    if out.exists():
        raise SpecError(f"{out} exists; a backup never overwrites a file, choose a new name")
    tmp = out.with_name(out.name + ".partial")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SpecError(f"{tmp} exists (another backup running, or one that was cut "
                        "short); remove it or choose another name") from None
    except OSError as e:
        raise SpecError(f"cannot write {tmp}: {e.strerror}") from None
    os.close(fd)
    try:
        src = sqlite3.connect(_uri(db_path, "rw"), uri=True)
        dst = sqlite3.connect(tmp, isolation_level=None)
        try:
            src.execute("PRAGMA busy_timeout=5000")
            src.backup(dst)  # one step: one consistent snapshot
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            jobs, store_id = _summary(dst, db_path)
        finally:
            src.close()
            dst.close()
        _fsync(tmp)
        tmp.replace(out)
    except sqlite3.Error as e:
        tmp.unlink(missing_ok=True)
        raise SpecError(f"cannot back up {db_path}: {e}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Copied(out, jobs, out.stat().st_size, store_id)


def check_backup(path: Path) -> tuple[int, str]:
    """The job count and store id of backup ``path``, after checking it.

    Raises:
        SpecError: it does not exist, is not an SQLite file, fails ``integrity_check`` or is
            not a Tessera store.
    """
    try:
        with path.open("rb") as f:
            header = f.read(16)
    except OSError as e:
        raise SpecError(f"cannot read the backup {path}: {e.strerror}") from None
    if header != SQLITE_MAGIC:
        raise SpecError(f"{path} is not an SQLite database (bad header); not a backup")
    try:
        db = sqlite3.connect(_uri(path, "ro"), uri=True)
        try:
            return _summary(db, path)
        finally:
            db.close()
    except sqlite3.Error as e:
        raise SpecError(f"cannot read the backup {path}: {e}") from None


def restore(state_dir: Path, src: Path) -> Copied:
    """Replace the store of ``state_dir`` by backup ``src`` (the service must be stopped).

    Raises:
        SpecError: a service holds the state dir, the state dir is unsafe, or the backup fails
            its checks (then nothing was changed).
    """
    if not state_dir.exists():
        state_dir.mkdir(parents=True, mode=STATE_DIR_MODE)
    check_private(state_dir)
    jobs, store_id = check_backup(src)
    lock = StateLock(state_dir)
    try:
        lock.acquire()
    except SpecError as e:
        raise SpecError(f"refusing to restore: {e}") from None
    try:
        db_path = state_dir / DB_NAME
        aside = move_aside(db_path)
        try:
            store_id = _copy_in(src, db_path, store_id)
            write_marker(db_path, store_id, jobs)
        except BaseException:
            _put_back(db_path, aside)
            raise
        return Copied(db_path, jobs, db_path.stat().st_size, store_id, aside)
    finally:
        lock.release()


def _copy_in(src: Path, db_path: Path, store_id: str) -> str:
    """Copy backup ``src`` to the new store ``db_path`` (0600, WAL); its store id (a backup
    from before stores had one gets one now)."""
    os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        source = sqlite3.connect(_uri(src, "ro"), uri=True)
        dst = sqlite3.connect(db_path, isolation_level=None)
        try:
            source.backup(dst)
            dst.execute("PRAGMA journal_mode=WAL")
            if not store_id:
                store_id = os.urandom(12).hex()
                dst.execute("INSERT OR REPLACE INTO meta VALUES ('store_id', ?)", (store_id,))
        finally:
            source.close()
            dst.close()
    except sqlite3.Error as e:
        raise SpecError(f"cannot restore {src}: {e}") from None
    _fsync(db_path)
    return store_id


def _put_back(db_path: Path, aside: Path | None) -> None:
    """Undo a restore that failed half-way: drop the partial copy, move the old files back."""
    for p in (db_path, *companions(db_path), marker_path(db_path)):
        p.unlink(missing_ok=True)
    if aside is not None:
        for p in aside.iterdir():
            p.rename(db_path.parent / p.name)
        aside.rmdir()
