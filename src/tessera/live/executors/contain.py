"""Contained runs: a rank's whole process tree lives and dies as one unit (standard library only).

A job's command may start children, and they may start their own, put themselves in a new
process group or a new session (``setsid``), or outlive the process that started them. Linux
gives three tools to keep such a tree together; a *guardian* process combines them:

* **child subreaper** (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphaned descendant is re-parented
  to the nearest subreaper ancestor instead of PID 1, so every process the command ever started
  stays below the guardian in the process tree (``/proc/<pid>/task/<tid>/children``), however
  it detaches;
* **parent-death signal** (``prctl(PR_SET_PDEATHSIG)``): the guardian is told when the process
  that started it (the local runner, or a Ray rank host) dies, even by SIGKILL, and then kills
  its tree before it exits;
* **freeze, then kill**: to kill a tree, every member found is stopped (SIGSTOP) so it cannot
  fork, the tree is walked again until no new member appears, then all get SIGKILL. Signals go
  through a pidfd after checking the process's start time (field 22 of ``stat``), so a pid that
  was reused meanwhile is never hit.

The guardian also **records** every process it sees (pid and start time, one line each) in a
file beside the run's logs. If the guardian itself is SIGKILLed, :func:`sweep` finds what is
left from those records (and from their descendants) before the job's next run starts, so no
attempt of a job starts while a process of an earlier attempt is alive, even after a restart.

The guardian is :mod:`~tessera.live.executors.guardian`, started by :func:`start_guardian`;
this module holds the tools it, the local runner and the Ray rank host share.
"""

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

GUARDIAN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guardian.py")
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
EXEC_FAILED_RC = 127


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def become_subreaper() -> None:
    """Orphaned descendants of this process are re-parented to it (not to PID 1)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Receive ``sig`` when the thread that forked this process dies (Linux only)."""
    _prctl(_PR_SET_PDEATHSIG, sig)


def _stat(pid: int) -> tuple[int, int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # the command name may hold spaces and parens
    return int(fields[1]), int(fields[19]), fields[0]  # ppid, starttime (field 22), state


def start_time(pid: int) -> int | None:
    """The start time of a live (non-zombie) process, or ``None`` if it is gone."""
    st = _stat(pid)
    return None if st is None or st[2] in "ZX" else st[1]


def tree(root: int) -> dict[int, int]:
    """Live descendants of ``root`` (``pid -> start time``), read from each process's
    ``/proc/<pid>/task/<tid>/children``, so the cost is the tree's size, not the machine's.

    A process forked during the walk may be missed; :func:`kill_tree` therefore freezes what
    it found and walks again until nothing new appears.
    """
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    for kid in map(int, f.read().split()):
                        start = start_time(kid)
                        if start is not None and kid not in found:
                            found[kid] = start
                            todo.append(kid)
    return found


def send(pid: int, start: int, sig: int) -> bool:
    """Signal ``pid`` only if it is still the process that started at ``start``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # a kernel without pidfds (before 5.3): check, then kill
        if start_time(pid) != start:
            return False
        try:
            os.kill(pid, sig)
            return True
        except OSError:
            return False
    try:
        if start_time(pid) != start:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def below(roots: dict[int, int]) -> dict[int, int]:
    """Live descendants of those ``roots`` (``pid -> start time``) that are still alive."""
    found: dict[int, int] = {}
    for pid, start in roots.items():
        if start_time(pid) == start:
            found.update(tree(pid))
    return {p: s for p, s in found.items() if p not in roots}


def signal_tree(roots: dict[int, int], sig: int, include_roots: bool = False) -> None:
    """Send ``sig`` to every live descendant of ``roots`` (and to the roots if asked)."""
    targets = below(roots)
    if include_roots:
        targets.update(roots)
    for pid, start in targets.items():
        send(pid, start, sig)


def kill_tree(roots: dict[int, int], include_roots: bool = False) -> dict[int, int]:
    """Freeze every descendant of ``roots`` until the tree stops growing, then SIGKILL all.

    Returns:
        what was killed (``pid -> start time``).
    """
    frozen: dict[int, int] = dict(roots) if include_roots else {}
    for pid, start in frozen.items():
        send(pid, start, signal.SIGSTOP)
    while True:
        new = {p: s for p, s in below({**roots, **frozen}).items() if p not in frozen}
        if not new:
            break
        for pid, start in new.items():
            send(pid, start, signal.SIGSTOP)
        frozen.update(new)
    for pid, start in frozen.items():
        send(pid, start, signal.SIGKILL)
    return frozen


def reap_children(timeout_s: float) -> None:
    """Reap every child (a subreaper inherits orphans to reap) until none is left, or for at
    most ``timeout_s``: a process stuck in the kernel must not hang its guardian forever."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:
            return


def private_file(path: str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> int:
    """Open ``path`` with ``flags``, created ``0600`` from its first byte, never through a
    symlink (every control file of a run: records, status, exit); returns the descriptor."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def record(path: str, procs: dict[int, int]) -> None:
    """Append ``pid start`` lines to the record file ``path``."""
    if procs:
        with os.fdopen(private_file(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "a") as f:
            f.write("".join(f"{pid} {start}\n" for pid, start in procs.items()))


def recorded(run_dirs: list[str]) -> dict[int, int]:
    """Every process listed in the ``*.pids`` record files of ``run_dirs``."""
    out: dict[int, int] = {}
    for d in run_dirs:
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(d):
                if name.endswith(".pids"):
                    with open(os.path.join(d, name)) as f:
                        for line in f:
                            pid, start = line.split()
                            out[int(pid)] = int(start)
    return out


def sweep(run_dirs: list[str], timeout_s: float = 5.0) -> dict[int, int]:
    """Kill every recorded process of ``run_dirs`` still alive (and its descendants); wait.

    Returns:
        the processes still alive after ``timeout_s`` (empty when all are gone).
    """
    return kill_and_wait({p: s for p, s in recorded(run_dirs).items() if start_time(p) == s},
                         timeout_s)


def kill_and_wait(roots: dict[int, int], timeout_s: float = 5.0) -> dict[int, int]:
    """Kill ``roots`` and all their descendants; wait up to ``timeout_s`` for them to be gone.

    Returns:
        the processes still alive after ``timeout_s`` (zombies count as gone).
    """
    killed = kill_tree(roots, include_roots=True) if roots else {}
    deadline = time.monotonic() + timeout_s
    while True:
        left = {p: s for p, s in killed.items() if start_time(p) == s}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.01)


def exec_failure(e: BaseException) -> str:
    """``exec failed: No such file or directory: /nonexistent/binary`` and the like."""
    if isinstance(e, OSError) and e.strerror:
        return f"exec failed: {e.strerror}" + (f": {e.filename}" if e.filename else "")
    return f"exec failed: {e}"


def start_guardian(spec: dict[str, Any], log: int) -> "subprocess.Popen[bytes]":
    """Start a guardian for one rank in a new process group, its output going to ``log``.

    Raises:
        OSError / ValueError: the guardian itself could not be started.
    """
    proc = subprocess.Popen([sys.executable, "-E", "-S", GUARDIAN], stdin=subprocess.PIPE,
                            stdout=log, stderr=subprocess.STDOUT, process_group=0,
                            env={"PATH": "/usr/bin:/bin"})
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(json.dumps({**spec, "parent": os.getpid()}).encode())
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    return proc


def read_status(path: str) -> dict[str, object]:
    """A guardian's status file (``{}`` when it wrote none: it was killed)."""
    try:
        with open(path) as f:
            data: dict[str, object] = json.load(f)
            return data
    except (FileNotFoundError, ValueError):
        return {}


def write_status(path: str, rc: int, detail: str, timed_out: bool) -> None:
    tmp = path + ".tmp"
    with os.fdopen(private_file(tmp), "w") as f:
        json.dump({"rc": rc, "detail": detail, "timed_out": timed_out}, f)
    os.replace(tmp, path)
