"""Where the live service keeps its state, where jobs work, and who may touch which.

Two directory trees, never one inside the other:

* the **state dir** (``--state``, default ``~/.tessera``) holds what decides who may do what:
  the job store ``state.db`` (with its ``-wal``/``-shm`` files; it holds every tenant's jobs and
  their ``env`` values) and its marker ``store.marker``, the tenancy file
  ``tessera-live.yaml`` (queues, quotas, token hashes) and the ``serve.lock`` that keeps a
  second service out. It is the service user's alone:
  the directory is ``0700`` and every file ``0600``. :func:`prepare` creates it so, and refuses
  to start on one that someone else owns or that group or others can read or write -- a job
  that could append a token hash to ``tessera-live.yaml`` would be admin after the next
  restart;
* the **work root** (``--work-dir``, default: ``<state dir>-work`` beside it, e.g.
  ``~/.tessera-work``) holds ``runs/<job>/<run>/`` (the executor's launch and exit files, the
  ranks' logs) and ``checkpoints/<job>/``, the default ``TESSERA_CHECKPOINT_DIR``. Jobs know
  these paths, so nothing in it is trusted. It is created ``0711``: other local users (a job's
  ``--run-as`` user among them) may pass through to a path they know but not list the job
  ids; ``runs/`` is ``0700``, since launch records hold the jobs' ``env`` values.

The layout does not make jobs unable to reach the state dir by itself: a job that runs as the
service user can open any file the service can. That needs a different user for jobs
(``--run-as``, see ``docs/security.md``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tessera.errors import SpecError

DB_NAME = "state.db"
#: The service's record that it has a store, and which (:mod:`tessera.live.storecheck`).
MARKER_NAME = "store.marker"
"""Not ``state.db.marker``: ``rm state.db*``, or moving a database with its companion files,
must not take the marker with it (the next start would then take an empty store for a first
one)."""
LOCK_NAME = "serve.lock"
CONFIG_FILE = "tessera-live.yaml"
PRIVATE_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", MARKER_NAME, CONFIG_FILE,
                 LOCK_NAME)
WORK_SUBDIRS = ("runs", "checkpoints")
STATE_DIR_MODE = 0o700
WORK_DIR_MODE = 0o711
#: ``runs/`` holds every run's launch record (with the job's ``env`` values) and logs: only the
#: service (and the runner it starts) may enter it.
RUNS_DIR_MODE = 0o700


class UnsafeState(SpecError):
    """The state dir or the work root is laid out or permitted so that others could use it."""


def default_work_dir(state_dir: Path) -> Path:
    """``~/.tessera`` -> ``~/.tessera-work``: beside the state dir, never inside it.

    Raises:
        UnsafeState: for ``/``, which has no beside (and would hold the work root).
    """
    absolute = Path(os.path.normpath(state_dir.expanduser().absolute()))
    if not absolute.name:
        raise UnsafeState(f"the state dir cannot be {absolute}; give --state a directory of "
                          "its own, e.g. ~/.tessera")
    return absolute.with_name(absolute.name + "-work")


@dataclass(frozen=True, slots=True)
class Layout:
    """The service's two trees (see the module docstring)."""

    state_dir: Path
    work_dir: Path

    @classmethod
    def of(cls, state_dir: Path, work_dir: Path | None = None) -> Layout:
        state = state_dir.expanduser().absolute()
        return cls(state, (work_dir or default_work_dir(state)).expanduser().absolute())

    @property
    def db_path(self) -> Path:
        return self.state_dir / DB_NAME

    @property
    def runs_dir(self) -> Path:
        return self.work_dir / "runs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.work_dir / "checkpoints"

    def checkpoint_dir_problem(self, path: str) -> str | None:
        """Why a job may not name ``path`` as its ``checkpoint_dir`` (``None``: it may).

        A job's own checkpoint dir must not overlap the state dir (the job could read the
        store or plant a token) nor the work root (where every job's run files and default
        checkpoints are), in either direction: ``/`` is refused as well as
        ``~/.tessera/x``. Symlinks that exist now are followed.
        """
        target = Path(os.path.normpath(path)).resolve()
        for root, what in ((self.state_dir, "the service's state dir"),
                           (self.work_dir, "the work root that holds every job's files")):
            real = root.resolve()
            if target == real or real in target.parents or target in real.parents:
                return (f"checkpoint_dir {path[:256]} overlaps {what} ({root}); choose a "
                        "directory of your own")
        return None

    def check_apart(self) -> None:
        """Refuse a work root inside the state dir, or the other way round."""
        state, work = self.state_dir.resolve(), self.work_dir.resolve()
        if state == work or state in work.parents:
            raise UnsafeState(f"the work root {self.work_dir} is inside the state dir "
                              f"{self.state_dir}, where jobs must not write; choose another "
                              "--work-dir")
        if work in state.parents:
            raise UnsafeState(f"the state dir {self.state_dir} is inside the work root "
                              f"{self.work_dir}, which jobs can reach; choose another --state "
                              "or --work-dir")


def prepare(layout: Layout) -> None:
    """Create or check both trees before the service opens anything in them.

    A directory created here gets its mode at once; one that exists must already be safe.

    Raises:
        UnsafeState: the trees overlap; the state dir or a service file is not the service
            user's own, is not a plain file/directory, or is open to group or others (the
            message gives the ``chmod``); a work directory is writable by others; the state
            dir still holds ``runs/`` or ``checkpoints/`` from an older Tessera.
    """
    layout.check_apart()
    _make_dir(layout.state_dir, STATE_DIR_MODE)
    check_private(layout.state_dir)
    for old in WORK_SUBDIRS:
        if (layout.state_dir / old).exists():
            raise UnsafeState(f"{layout.state_dir / old} is from an older Tessera that kept job "
                              f"files in the state dir; with the service stopped, run: mv "
                              f"{layout.state_dir / old} {layout.work_dir / old}")
    _make_dir(layout.work_dir, WORK_DIR_MODE)
    for sub in WORK_SUBDIRS:
        _make_dir(layout.work_dir / sub, WORK_DIR_MODE)
    for d in (layout.work_dir, layout.runs_dir, layout.checkpoints_dir):
        _check_not_shared(d)
    layout.runs_dir.chmod(RUNS_DIR_MODE)  # also one an older Tessera made 0711 or 0755


def check_private(state_dir: Path) -> None:
    """Refuse a state dir (or a service file in it) that is not the service user's alone.

    Raises:
        UnsafeState: naming the path and the command that fixes it.
    """
    _check_owned(state_dir, STATE_DIR_MODE, "chmod 700")
    for name in PRIVATE_FILES:
        path = state_dir / name
        if path.is_symlink() or path.exists():
            _check_owned(path, 0o600, "chmod 600")


def _check_owned(path: Path, mode: int, fix: str) -> None:
    st = path.lstat()
    want_dir = mode == STATE_DIR_MODE
    if stat.S_ISLNK(st.st_mode) or (stat.S_ISDIR(st.st_mode) != want_dir):
        kind = "a directory" if want_dir else "a plain file"
        raise UnsafeState(f"refusing to start: {path} is not {kind} (a symlink or other kind "
                          "of file); replace it")
    if st.st_uid != os.geteuid():
        raise UnsafeState(f"refusing to start: {path} belongs to uid {st.st_uid}, not to the "
                          f"service's user (uid {os.geteuid()}); run: chown {os.geteuid()} "
                          f"{path}")
    if st.st_mode & 0o077:
        raise UnsafeState(f"refusing to start: {path} is open to group or others (mode "
                          f"{stat.S_IMODE(st.st_mode):04o}); run: {fix} {path}")


def _check_not_shared(path: Path) -> None:
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UnsafeState(f"refusing to start: {path} must be a directory owned by the "
                          f"service's user (uid {os.geteuid()})")
    if st.st_mode & 0o022:
        raise UnsafeState(f"refusing to start: {path} is writable by group or others (mode "
                          f"{stat.S_IMODE(st.st_mode):04o}); run: chmod go-w {path}")


def _make_dir(path: Path, mode: int) -> None:
    """Create ``path`` (and missing parents) with ``mode`` exactly, whatever the umask."""
    try:
        path.mkdir(parents=True, mode=mode)
    except FileExistsError:
        return
    path.chmod(mode)


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically by a file holding ``text``, mode 0600 from its first byte
    (the service's files in the state dir: the tenancy config, the embedded Ray head's
    record)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (SQLite then keeps the mode)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class StateLock:
    """An exclusive ``flock`` on ``serve.lock``: one service per state dir.

    The kernel drops the lock when the process ends, however it ends, so a crashed service
    never leaves a stale lock behind. The file holds the owner's pid, for the message.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            SpecError: another process holds it (the message names its pid).
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SpecError(f"state dir {self.path.parent} is in use by another tessera serve "
                            f"(pid {holder}); stop it, or pass another --state") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
