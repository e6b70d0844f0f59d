"""Contained runs: a rank's whole process tree lives and dies as one unit (standard library only).

A job's command may start children, and they may start their own, put themselves in a new
process group or a new session (``setsid``), or outlive the process that started them. Linux
gives three tools to keep such a tree together; a *guardian* process combines them:

* **child subreaper** (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphaned descendant is re-parented
  to the nearest subreaper ancestor instead of PID 1, so every process the command ever started
  stays below the guardian in the ``ppid`` tree (``/proc/<pid>/stat``), however it detaches;
* **parent-death signal** (``prctl(PR_SET_PDEATHSIG)``): the guardian is told when the process
  that started it (the local runner, or a Ray rank actor) dies, even by SIGKILL, and then kills
  its tree before it exits;
* **freeze, then kill**: to kill a tree, every member found is stopped (SIGSTOP) so it cannot
  fork, the tree is walked again until no new member appears, then all get SIGKILL. Signals go
  through a pidfd after checking the process's start time (field 22 of ``stat``), so a pid that
  was reused meanwhile is never hit.

The guardian also **records** every process it sees (pid and start time, one line each) in a
file beside the run's logs. If the guardian itself is SIGKILLed, :func:`sweep` finds what is
left from those records (and from their descendants) before the job's next run starts, so no
attempt of a job starts while a process of an earlier attempt is alive, even after a restart.

The guardian is this file run as a script, ``python -I -S contain.py``, reading one JSON spec
on stdin (:func:`start_guardian` writes it). It is two processes: a *relay* that dies with its
launcher and passes stop signals on, and below it the guardian proper, whose parent-death
signal is the relay's death (Ray SIGKILLs a dying worker's direct children, which would
otherwise take the guardian down before it could clean up). The spec::

    {"argv": [...], "env": {...}, "user": null | "name", "max_runtime_s": null | 3600,
     "grace_s": 10, "status": "<path>", "record": "<path>", "parent": <pid of the launcher>}

It runs the command in its own process group with the spec's environment (as ``user`` when
given, with that user's groups), forwards SIGTERM to the whole tree and kills it after
``grace_s``, does the same once the command has run ``max_runtime_s``, kills whatever is left
when the command exits, and writes ``status`` (``{"rc", "detail", "timed_out"}``). It then exits
the way its command did (same code, or same signal), so its parent sees the command's status.
A command that cannot start exits 127 with ``detail`` saying why (``exec failed: ...``).
"""

import contextlib
import ctypes
import json
import os
import pwd
import resource
import select
import signal
import subprocess
import sys
import time
from typing import Any

GUARDIAN = os.path.abspath(__file__)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
SCAN_S = 0.5
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


def proc_table() -> dict[int, tuple[int, int, str]]:
    """Every live process: ``pid -> (ppid, start time in clock ticks, state letter)``."""
    out: dict[int, tuple[int, int, str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


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


def descendants(roots: dict[int, int], table: dict[int, tuple[int, int, str]]
                ) -> dict[int, int]:
    """Live descendants of the live ``roots`` (``pid -> start time``), roots excluded."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _start, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = [p for p, start in roots.items() if p in table and table[p][1] == start]
    found: dict[int, int] = {}
    while todo:
        for kid in children.get(todo.pop(), []):
            if kid not in found and kid not in roots and table[kid][2] not in "ZX":
                found[kid] = table[kid][1]
                todo.append(kid)
    return found


def send(pid: int, start: int, sig: int) -> bool:
    """Signal ``pid`` only if it is still the process that started at ``start``."""
    try:
        fd = os.pidfd_open(pid)
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


def signal_tree(roots: dict[int, int], sig: int, include_roots: bool = False) -> None:
    """Send ``sig`` to every live descendant of ``roots`` (and to the roots if asked)."""
    targets = descendants(roots, proc_table())
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
        new = {p: s for p, s in descendants({**roots, **frozen}, proc_table()).items()
               if p not in frozen}
        if not new:
            break
        for pid, start in new.items():
            send(pid, start, signal.SIGSTOP)
        frozen.update(new)
    for pid, start in frozen.items():
        send(pid, start, signal.SIGKILL)
    return frozen


def record(path: str, procs: dict[int, int]) -> None:
    """Append ``pid start`` lines to the record file ``path``."""
    if procs:
        with open(path, "a") as f:
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
    proc = subprocess.Popen([sys.executable, "-I", "-S", GUARDIAN], stdin=subprocess.PIPE,
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


def _write_status(path: str, rc: int, detail: str, timed_out: bool) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"rc": rc, "detail": detail, "timed_out": timed_out}, f)
    os.replace(tmp, path)


def _credentials(user: str | None) -> tuple[int | None, int | None, list[int] | None]:
    """(uid, gid, groups) that run the command as ``user``; all ``None``: stay as we are."""
    if not user:
        return None, None, None
    pw = pwd.getpwnam(user)
    if pw.pw_uid == os.geteuid():
        return None, None, None
    return pw.pw_uid, pw.pw_gid, os.getgrouplist(user, pw.pw_gid)


def _child_setup(checkpoint_dir: str | None) -> None:
    """In the command's process, after its user was set: die with the guardian, and create a
    checkpoint directory the job named (with the job's own permissions)."""
    die_with_parent(signal.SIGKILL)
    if checkpoint_dir:
        with contextlib.suppress(OSError):
            os.makedirs(checkpoint_dir, exist_ok=True)


def relay(spec: dict[str, Any]) -> int:
    """The guardian's outer process: dies with the launcher, runs :func:`guard` in a child.

    Ray kills a dying worker's direct children with SIGKILL; this process is that child, so the
    guardian proper, one level down, survives it and is told by its parent-death signal to
    kill the tree. SIGTERM and SIGINT are passed on; returns the guardian's status.
    """
    die_with_parent(signal.SIGKILL)
    if os.getppid() != spec["parent"]:  # the launcher died before the signal was armed
        return -signal.SIGKILL
    record(str(spec["record"]), {os.getpid(): start_time(os.getpid()) or 0})
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        _exit_like(guard(spec, parent))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: os.kill(child, s))
    try:
        return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    except ChildProcessError:
        return -signal.SIGKILL


def guard(spec: dict[str, Any], parent: int) -> int:
    """Run one rank's command contained (see the module docstring); returns its exit code
    (negative: the signal that killed it). ``parent``: the relay whose death means "kill"."""
    status_path, record_path = str(spec["status"]), str(spec["record"])
    me = {os.getpid(): start_time(os.getpid()) or 0}
    record(record_path, me)
    become_subreaper()
    die_with_parent(signal.SIGHUP)
    if os.getppid() != parent:  # the relay died before PDEATHSIG was armed
        _write_status(status_path, -signal.SIGKILL, "launcher died before the start", False)
        return -signal.SIGKILL
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, lambda *_: None)
    env = {str(k): str(v) for k, v in dict(spec["env"]).items()}
    user = spec.get("user")
    try:
        uid, gid, groups = _credentials(str(user) if user else None)
        child = subprocess.Popen(
            [str(a) for a in spec["argv"]], env=env, stdin=subprocess.DEVNULL, process_group=0,
            user=uid, group=gid, extra_groups=groups,
            preexec_fn=lambda: _child_setup(env.get("TESSERA_CHECKPOINT_DIR") if user else None))
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        _write_status(status_path, EXEC_FAILED_RC, exec_failure(e), False)
        return EXEC_FAILED_RC
    record(record_path, {child.pid: start_time(child.pid) or 0})
    grace_s = float(spec.get("grace_s") or 10.0)
    limit = float(spec["max_runtime_s"]) if spec.get("max_runtime_s") else None
    now = time.monotonic()
    runtime_end = now + limit if limit else None
    kill_at: float | None = None
    timed_out = False
    next_scan = now + 0.05
    seen: dict[int, int] = {child.pid: 0}
    code: int | None = None
    while code is None:
        with contextlib.suppress(ChildProcessError):
            while (reaped := os.waitpid(-1, os.WNOHANG))[0]:
                if reaped[0] == child.pid:
                    code = os.waitstatus_to_exitcode(reaped[1])
        if code is not None:
            break
        now = time.monotonic()
        stop = runtime_end is not None and now >= runtime_end and kill_at is None
        timed_out |= stop
        if kill_at is not None and now >= kill_at:
            kill_tree(me)
            kill_at = float("inf")
        if now >= next_scan:
            new = {p: s for p, s in descendants(me, proc_table()).items() if p not in seen}
            record(record_path, new)
            seen.update(new)
            next_scan = now + SCAN_S
        ends = [t for t in (runtime_end if kill_at is None else None, kill_at, next_scan) if t]
        ready, _, _ = select.select([wake_r], [], [], max(min(ends) - now, 0.0))
        sigs = os.read(wake_r, 256) if ready else b""
        if os.getppid() != parent:  # the launcher died: the run is lost, kill it all
            kill_tree(me)
            kill_at = float("inf")
        elif stop or ((signal.SIGTERM in sigs or signal.SIGINT in sigs) and kill_at is None):
            signal_tree(me, signal.SIGTERM)
            kill_at = time.monotonic() + grace_s
    kill_tree(me)
    _reap_all(5.0)
    detail = f"exceeded max_runtime_s={limit:g}" if timed_out else ""
    _write_status(status_path, code, detail, timed_out)
    return code


def _reap_all(timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:
            return


def _exit_like(code: int) -> None:
    """Exit with ``code``, or die of signal ``-code`` (without a core dump)."""
    if code >= 0:
        sys.exit(code)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.set_wakeup_fd(-1)
    with contextlib.suppress(OSError, ValueError):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    sys.exit(128 - code)


if __name__ == "__main__":
    _exit_like(relay(json.loads(sys.stdin.buffer.read())))
