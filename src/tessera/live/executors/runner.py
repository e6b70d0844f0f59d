"""The process that owns one run of a job on the local executor (standard library only).

``python -S runner.py RUN_DIR`` reads ``RUN_DIR/launch.json`` (argv, per-rank environments, the
user to run as, the runtime limit), then:

1. **claims the run**: writes its pid to a private file and hard-links it to ``RUN_DIR/marker``.
   ``link`` fails if the marker exists, so of two runners started for the same run (a service
   that crashed just after starting one, then restarted and started another) exactly one runs
   the command; the other exits at once;
2. becomes a **child subreaper** and starts every rank under a guardian
   (:mod:`~tessera.live.executors.guardian`), each in its own process group, logging to
   ``rank-<i>.log``. A guardian keeps its rank's whole process tree below it, records it in
   ``rank-<i>.pids``, kills it when the rank's command ends, when its runtime limit passes, or
   when this runner dies (even by SIGKILL);
3. on SIGTERM forwards SIGTERM to the guardians (each stops its whole tree) and kills every
   descendant after the grace period; if one rank fails, stops the others the same way (a gang
   lives and dies together);
4. when the last rank ended, kills whatever is left below it (a guardian killed by SIGKILL
   leaves its orphans to this subreaper) and writes ``RUN_DIR/exit.json`` atomically
   (``{"rc", "stopped", "ranks", "detail", "timed_out"}``); ``rc`` is the status of the rank
   that failed first (the cause), else 0, and ``detail`` is that rank's guardian's word on it
   (``exec failed: ...``, ``exceeded max_runtime_s=...``).

The runner lives in its own session, so it outlives a killed service; the restarted service
reads the marker and the exit file to adopt it.
"""

import contextlib
import json
import os
import signal
import sys

try:
    from tessera.live.executors import contain
except ImportError:  # run as ``python -S runner.py``: its own directory is sys.path[0]
    import contain  # type: ignore[no-redef]

#: Extra time past the grace period before the runner kills what its guardians did not.
BACKSTOP_S = 2.0


def _claim(run_dir: str) -> bool:
    tmp = os.path.join(run_dir, f".marker.{os.getpid()}")
    with os.fdopen(contain.private_file(tmp), "w") as f:
        f.write(str(os.getpid()))
    try:
        os.link(tmp, os.path.join(run_dir, "marker"))
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


#: The guardians' ``Popen`` objects, held for the runner's life. A ``Popen`` dropped while its
#: process runs polls it when collected (and every later ``Popen`` polls the dropped ones):
#: a rank that ended by then would be reaped there, its status lost to :func:`main`'s
#: ``waitpid``, and the gang recorded as failed (``-1``) though every rank exited 0.
_GUARDIANS: list[object] = []


def _start_rank(run_dir: str, i: int, launch: dict[str, object], env: dict[str, str]) -> int:
    """Start rank ``i`` under its guardian, logging to ``rank-<i>.log`` (``0600``, at most
    ``launch["log_cap_bytes"]``); returns its pid, or ``-1`` if it could not start. The
    guardian is reaped by :func:`main` alone (its ``Popen`` is kept in ``_GUARDIANS``)."""
    append = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    with os.fdopen(contain.private_file(os.path.join(run_dir, f"rank-{i}.log"), append),
                   "ab") as log:
        try:
            proc = contain.start_guardian({
                "argv": launch["argv"], "env": env, "user": launch.get("user"),
                "max_runtime_s": launch.get("max_runtime_s"), "grace_s": launch["grace_s"],
                "status": os.path.join(run_dir, f"rank-{i}.status"),
                "record": os.path.join(run_dir, f"rank-{i}.pids"),
                "log_cap_bytes": launch.get("log_cap_bytes"),
                "host": _rank_host(launch, i)}, log.fileno())
            _GUARDIANS.append(proc)
            return proc.pid
        except (OSError, ValueError) as e:
            contain.write_status(os.path.join(run_dir, f"rank-{i}.status"),
                                 contain.EXEC_FAILED_RC, contain.exec_failure(e), False)
            return -1


def _rank_host(launch: dict[str, object], i: int) -> object:
    """Rank ``i``'s CPU ids and memory limit from the launch record (``None``: none)."""
    limits = launch.get("host")
    return limits[i] if isinstance(limits, list) and i < len(limits) else None


def main(run_dir: str) -> int:
    with open(os.path.join(run_dir, "launch.json")) as f:
        launch = json.load(f)
    if not _claim(run_dir):
        return 0
    me = {os.getpid(): contain.start_time(os.getpid()) or 0}
    contain.record(os.path.join(run_dir, "runner.pids"), me)
    contain.become_subreaper()
    grace_s = float(launch["grace_s"])
    pids: list[int] = []
    stopping = {"requested": False, "signalled": False}

    def on_alarm(_signum: int, _frame: object) -> None:
        contain.kill_tree(me)

    def stop_gang() -> None:
        if not stopping["signalled"]:
            stopping["signalled"] = True
            for pid in pids:
                if pid > 0:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
            signal.setitimer(signal.ITIMER_REAL, max(grace_s, 0.01) + BACKSTOP_S)

    def on_term(_signum: int, _frame: object) -> None:
        stopping["requested"] = True
        stop_gang()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    codes: dict[int, int] = {}
    for i, env in enumerate(launch["ranks"]):  # each already holds base_env (launch_env)
        pids.append(_start_rank(run_dir, i, launch, env))
        if pids[-1] < 0:
            codes[i] = contain.EXEC_FAILED_RC
    with os.fdopen(contain.private_file(os.path.join(run_dir, "ranks.json")), "w") as f:
        json.dump(pids, f)
    cause: list[int] = [i for i in codes][:1]  # the rank whose failure brought the gang down
    if stopping["requested"] or cause:
        stop_gang()
    while len(codes) < len(pids):
        try:
            pid, status = os.waitpid(-1, 0)  # guardians, and orphans this subreaper inherited
        except ChildProcessError:
            break
        if pid in pids:
            i = pids.index(pid)
            codes[i] = os.waitstatus_to_exitcode(status)
            if codes[i] != 0 and not stopping["requested"] and not cause:
                cause.append(i)
                stop_gang()
    signal.setitimer(signal.ITIMER_REAL, 0)
    contain.kill_tree(me)
    contain.reap_children(5.0)
    ranks = [codes.get(i, -1) for i in range(len(pids))]
    first = cause[0] if cause else next((i for i, c in enumerate(ranks) if c != 0), None)
    rc = ranks[first] if first is not None else 0
    why = contain.read_status(os.path.join(run_dir, f"rank-{first}.status")) \
        if first is not None else {}
    tmp = os.path.join(run_dir, "exit.json.tmp")
    with os.fdopen(contain.private_file(tmp), "w") as f:
        json.dump({"rc": rc, "stopped": stopping["requested"], "ranks": ranks,
                   "detail": why.get("detail", ""), "timed_out": bool(why.get("timed_out"))}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(run_dir, "exit.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
