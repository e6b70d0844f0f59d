"""Rank logs: private to the service, bounded in size, removed a while after their run ended.

Every rank of every run logs to ``<work root>/runs/<job>/<run>/rank-<i>.log`` on the node that
runs it -- the local executor's run directory, and under Ray the same path on the rank's own
node, created there by the node's rank host (no shared filesystem is assumed). One tree per
service: two services never share a work root (``tessera serve`` locks its state dir, and the
work root sits beside it).

**Private.** Each directory of the tree is ``0700`` and each file ``0600`` from its first byte
(``mkdir``/``O_CREAT`` with those modes, never a ``chmod`` afterwards), all owned by the
service's user -- root when jobs run as other users. A job never opens its own log: its
guardian reads the job's output from a pipe and appends it to the log file, which root opened
(:mod:`~tessera.live.executors.guardian`). So a ``run_as`` job can read no log, its own
included (its tenant reads it through ``tessera logs``), and cannot write the run's control
files (claim, status, exit records) either.

**Bounded.** A rank's log holds at most ``cap_bytes`` of output; what comes after is read and
discarded, and one line says so (:data:`TRUNCATED_MARKER`). The job keeps running: it never
sees a full disk nor a signal (``RLIMIT_FSIZE`` would kill it with SIGXFSZ).

**Retention.** A finished run's directory (its logs, launch and exit records) is removed
``retention_s`` after the run ended (the newest modification time in the directory). Nothing
of a run still running is removed: the caller says which runs run. The local executor sweeps
its runs directory; under Ray each node's rank host sweeps its node's tree (and the service
the exit records it keeps), see :func:`remove_expired`.

Both are set in the ``logs:`` section of ``tessera-live.yaml``::

    logs: {cap_bytes: 104857600, retention_s: 604800}
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as settings_dataclass

from tessera.live.executors.guardian import TRUNCATED_MARKER

__all__ = ["DEFAULT_LOGS", "TRUNCATED_MARKER", "LogSettings", "RankLogs", "ensure_runs_dir",
           "open_log", "private_run_dir", "remove_expired", "run_ended_s"]

#: Directories of the runs tree, and files in it.
DIR_MODE = 0o700
FILE_MODE = 0o600
#: Directories above a runs dir that a rank host creates on a node that lacks them: others may
#: pass through (a run-as job to its checkpoint directory beside ``runs/``), not list.
ABOVE_MODE = 0o711


@settings_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class LogSettings:
    """How big a rank's log may grow and how long a finished run's files are kept.

    Attributes:
        cap_bytes: most bytes of output kept per rank log of a run (default 100 MiB).
        retention_s: a finished run's directory is removed this long after the run ended
            (default 7 days).
    """

    cap_bytes: Annotated[int, Field(ge=1024, le=2**50)] = 100 * 2**20
    retention_s: Annotated[float, Field(gt=0, le=10 * 365 * 86400)] = 7 * 86400.0


DEFAULT_LOGS = LogSettings()


@dataclass(frozen=True, slots=True)
class RankLogs:
    """What a Ray rank host needs to log a rank: the service's runs dir (the same path on every
    node) and the cap."""

    runs_dir: str
    cap_bytes: int


def _mkdir_private(path: Path, mode: int = DIR_MODE) -> None:
    """Create ``path`` with ``mode`` (one level); refuse one that exists but is a symlink, not
    a directory, or not ours; narrow an existing one of ours to ``mode``.

    Raises:
        PermissionError: ``path`` is a symlink, not a directory, or owned by another user.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise PermissionError(f"{path} must be a directory owned by uid {os.geteuid()}, not a "
                              "symlink or another user's")
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)


def ensure_runs_dir(runs_dir: Path) -> None:
    """Make ``runs_dir`` exist, ``0700`` and ours (on a node where the service never ran, the
    directories above it are created ``0711``).

    Raises:
        PermissionError: ``runs_dir`` is a symlink or another user's.
    """
    missing = [p for p in (runs_dir, *runs_dir.parents) if not os.path.lexists(p)]
    for p in reversed(missing[1:]):
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, ABOVE_MODE)
    _mkdir_private(runs_dir)


def private_run_dir(runs_dir: Path, job_id: str, run: int) -> Path:
    """``<runs_dir>/<job>/<run>``, created ``0700`` level by level; returns it.

    Raises:
        PermissionError: a level is a symlink or another user's.
    """
    ensure_runs_dir(runs_dir)
    job_dir = runs_dir / job_id
    _mkdir_private(job_dir)
    run_dir = job_dir / str(run)
    _mkdir_private(run_dir)
    return run_dir


def open_log(path: Path | str) -> int:
    """Open a rank's log for appending, ``0600`` from the first byte, never through a symlink;
    returns the descriptor (the caller closes it)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                   FILE_MODE)


def run_ended_s(run_dir: Path) -> float:
    """When a run last changed: the newest modification time of its directory and files (a
    finished run's exit record or the last line of its logs)."""
    newest = os.lstat(run_dir).st_mtime
    with contextlib.suppress(OSError):
        for entry in os.scandir(run_dir):
            with contextlib.suppress(OSError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return newest


def remove_expired(runs_dir: Path, retention_s: float, now_s: float,
                   running: Callable[[str, int], bool],
                   only_if: Callable[[Path], bool] | None = None) -> list[Path]:
    """Remove every run directory of ``runs_dir`` whose run ended more than ``retention_s``
    before ``now_s``; then every job directory left empty. Returns the removed run dirs.

    Args:
        running: ``running(job_id, run)``: the run may still run here; it is never touched.
        only_if: also required of a run dir before it is removed (the Ray service leaves a
            dir with rank logs to the node's rank host).
    """
    removed: list[Path] = []
    try:
        jobs = list(os.scandir(runs_dir))
    except FileNotFoundError:
        return removed
    for job in jobs:
        if not job.is_dir(follow_symlinks=False):
            continue
        here = len(removed)
        with contextlib.suppress(OSError):
            for entry in list(os.scandir(job.path)):
                if not (entry.name.isdigit() and entry.is_dir(follow_symlinks=False)):
                    continue
                run_dir = Path(entry.path)
                if now_s - run_ended_s(run_dir) <= retention_s or \
                        running(job.name, int(entry.name)) or \
                        (only_if is not None and not only_if(run_dir)):
                    continue
                shutil.rmtree(run_dir, ignore_errors=True)
                removed.append(run_dir)
        with contextlib.suppress(OSError):  # not empty (a running run, a fresh one): kept
            if len(removed) > here and not any(os.scandir(job.path)):
                os.rmdir(job.path)
    return removed
