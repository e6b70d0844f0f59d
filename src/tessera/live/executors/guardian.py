"""One rank's guardian: keeps the rank's process tree together (standard library only).

The concept is in :mod:`~tessera.live.executors.contain`. The guardian is this file run as a
script, ``python -E -S guardian.py``, reading one JSON spec on stdin
(:func:`~tessera.live.executors.contain.start_guardian` writes it). It is two processes: a
*relay* that dies with its launcher and passes stop signals on, and below it the guardian
proper, whose parent-death signal is the relay's death (Ray SIGKILLs a dying worker's direct
children, which would otherwise take the guardian down before it could clean up). The spec::

    {"argv": [...], "env": {...}, "user": null | "name", "max_runtime_s": null | 3600,
     "grace_s": 10, "status": "<path>", "record": "<path>", "parent": <pid of the launcher>,
     "log_cap_bytes": null | 104857600}

It runs the command in its own process group with the spec's environment (as ``user`` when
given, with that user's groups), forwards SIGTERM to the whole tree and kills it after
``grace_s``, does the same once the command has run ``max_runtime_s``, kills whatever is left
when the command exits, and writes ``status`` (``{"rc", "detail", "timed_out"}``). It then exits
the way its command did (same code, or same signal), so its parent sees the command's status.
A command that cannot start exits 127 with ``detail`` saying why (``exec failed: ...``).

**Output.** The guardian's own stdout is the rank's log, opened by the launcher (as root when
the job runs as another user). The command does not get it: its stdout and stderr are a pipe
the guardian drains into the log (:class:`LogCap`), so the job can neither read, truncate nor
seek its log, and once ``log_cap_bytes`` are written the rest is read and dropped after one
:data:`TRUNCATED_MARKER` line -- the job keeps running, its writes never block or fail.
"""

import contextlib
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

try:
    from tessera.live.executors import contain, host_limits
except ImportError:  # run as ``python -E -S guardian.py``: its own directory is sys.path[0]
    import contain  # type: ignore[no-redef]
    import host_limits  # type: ignore[no-redef]

#: How often the guardian records the processes below it.
SCAN_S = 0.5
#: The line that ends a log cut at its cap (``{cap}``: the cap in bytes).
TRUNCATED_MARKER = "[tessera: log truncated at {cap} bytes; further output discarded]"
#: Most bytes the guardian moves from the pipe to the log before it looks at signals again.
DRAIN_BYTES = 1 << 20


class LogCap:
    """Appends the command's output to the log (descriptor ``out``) up to ``cap`` bytes in
    all (``None``: no cap), then writes :data:`TRUNCATED_MARKER` once and drops the rest."""

    def __init__(self, out: int, cap: int | None) -> None:
        self.out = out
        self.cap = cap
        try:
            self.written = os.fstat(out).st_size
        except OSError:
            self.written = 0
        self.truncated = False
        self.last = b"\n"

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.out, view):]
            except InterruptedError:
                continue
            except OSError:  # a full disk or a closed log: the job must not notice
                return

    def feed(self, data: bytes) -> None:
        room = len(data) if self.cap is None else max(self.cap - self.written, 0)
        keep = data[:room]
        if keep:
            self._write(keep)
            self.written += len(keep)
            self.last = keep[-1:]
        if len(keep) < len(data) and not self.truncated:
            self.truncated = True
            lead = b"" if self.last == b"\n" else b"\n"
            self._write(lead + TRUNCATED_MARKER.format(cap=self.cap).encode() + b"\n")

    def drain(self, pipe: int, most_bytes: int = DRAIN_BYTES) -> bool:
        """Move what the (non-blocking) ``pipe`` holds, up to ``most_bytes``; returns
        ``False`` at end of file (every writer closed it)."""
        moved = 0
        while moved < most_bytes:
            try:
                data = os.read(pipe, 65536)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            if not data:
                return False
            self.feed(data)
            moved += len(data)
        return True


def _credentials(user: str | None) -> tuple[int | None, int | None, list[int] | None]:
    """(uid, gid, groups) that run the command as ``user``; all ``None``: stay as we are."""
    if not user:
        return None, None, None
    pw = pwd.getpwnam(user)
    if pw.pw_uid == os.geteuid():
        return None, None, None
    return pw.pw_uid, pw.pw_gid, os.getgrouplist(user, pw.pw_gid)


def _child_setup(checkpoint_dir: str | None, host: dict[str, Any] | None = None) -> None:
    """In the command's process, after its user was set: die with the guardian, pin its CPUs
    and cap its memory when the run holds host resources (:mod:`host_limits`), and create a
    checkpoint directory the job named (with the job's own permissions)."""
    contain.die_with_parent(signal.SIGKILL)
    if host:
        host_limits.apply_in_child(host)
    if checkpoint_dir:
        with contextlib.suppress(OSError):
            os.makedirs(checkpoint_dir, exist_ok=True)


def _wake_on_signals() -> int:
    """A pipe that receives a byte (the signal's number) for each SIGTERM, SIGINT, SIGHUP and
    SIGCHLD, so one ``select`` waits for signals and deadlines alike; returns its read end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, lambda *_: None)
    return wake_r


def _start_command(spec: dict[str, Any], out: int) -> "subprocess.Popen[bytes]":
    """Start the rank's command in its own process group, as the spec's user if it names one,
    its stdout and stderr going to ``out`` (the pipe's write end).

    Raises:
        OSError, ValueError, KeyError, SubprocessError: it could not start (the caller says
            ``exec failed: ...``).
    """
    env = {str(k): str(v) for k, v in dict(spec["env"]).items()}
    user = str(spec["user"]) if spec.get("user") else None
    uid, gid, groups = _credentials(user)
    ckpt = env.get("TESSERA_CHECKPOINT_DIR") if user else None
    return subprocess.Popen([str(a) for a in spec["argv"]], env=env, stdin=subprocess.DEVNULL,
                            stdout=out, stderr=out, process_group=0, user=uid, group=gid,
                            extra_groups=groups,
                            preexec_fn=lambda: _child_setup(ckpt, spec.get("host")))


def relay(spec: dict[str, Any]) -> int:
    """The guardian's outer process: dies with the launcher, runs :func:`guard` in a child.

    Ray kills a dying worker's direct children with SIGKILL; this process is that child, so the
    guardian proper, one level down, survives it and is told by its parent-death signal to
    kill the tree. SIGTERM and SIGINT are passed on; returns the guardian's status.
    """
    contain.die_with_parent(signal.SIGKILL)
    if os.getppid() != spec["parent"]:  # the launcher died before the signal was armed
        return -signal.SIGKILL
    contain.record(str(spec["record"]), {os.getpid(): contain.start_time(os.getpid()) or 0})
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
    os.setpgid(0, 0)  # a signal to the relay's group (a crash, a Ray kill) must leave us be
    me = {os.getpid(): contain.start_time(os.getpid()) or 0}
    contain.record(record_path, me)
    contain.become_subreaper()
    contain.die_with_parent(signal.SIGHUP)
    if os.getppid() != parent:  # the relay died before PDEATHSIG was armed
        contain.write_status(status_path, -signal.SIGKILL, "launcher died before the start", False)
        return -signal.SIGKILL
    wake_r = _wake_on_signals()
    out_r, out_w = os.pipe()
    try:
        host = spec.get("host")
        if host and host.get("how") == "cgroup":
            host_limits.enter_cgroup(host)  # (the command inherits the guardian's cgroup)
        child = _start_command(spec, out_w)
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        contain.write_status(status_path, contain.EXEC_FAILED_RC, contain.exec_failure(e), False)
        return contain.EXEC_FAILED_RC
    finally:
        os.close(out_w)
    os.set_blocking(out_r, False)
    cap = spec.get("log_cap_bytes")
    log = LogCap(sys.stdout.fileno(), int(cap) if cap else None)
    reading = True
    contain.record(record_path, {child.pid: contain.start_time(child.pid) or 0})
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
            contain.kill_tree(me)
            kill_at = float("inf")
        if now >= next_scan:
            new = {p: s for p, s in contain.tree(os.getpid()).items() if p not in seen}
            contain.record(record_path, new)
            seen.update(new)
            next_scan = now + SCAN_S
        ends = [t for t in (runtime_end if kill_at is None else None, kill_at, next_scan) if t]
        ready, _, _ = select.select([wake_r, out_r] if reading else [wake_r], [], [],
                                    max(min(ends) - now, 0.0))
        if out_r in ready:
            reading = log.drain(out_r)
        sigs = os.read(wake_r, 256) if wake_r in ready else b""
        if os.getppid() != parent:  # the launcher died: the run is lost, kill it all
            contain.kill_tree(me)
            kill_at = float("inf")
        elif stop or ((signal.SIGTERM in sigs or signal.SIGINT in sigs) and kill_at is None):
            contain.signal_tree(me, signal.SIGTERM)
            kill_at = time.monotonic() + grace_s
    contain.kill_tree(me)
    contain.reap_children(5.0)
    while reading and log.drain(out_r):  # what the tree wrote before it ended
        if not select.select([out_r], [], [], 0)[0]:
            break
    os.close(out_r)
    detail = f"exceeded max_runtime_s={limit:g}" if timed_out else ""
    contain.write_status(status_path, code, detail, timed_out)
    return code


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
