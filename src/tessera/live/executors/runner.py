"""The process that owns one run of a job on the local executor (standard library only).

``python -S runner.py RUN_DIR`` reads ``RUN_DIR/launch.json`` (argv and per-rank environments),
then:

1. **claims the run**: writes its pid to a private file and hard-links it to ``RUN_DIR/marker``.
   ``link`` fails if the marker exists, so of two runners started for the same run (a service
   that crashed just after starting one, then restarted and started another) exactly one runs
   the command; the other exits at once;
2. starts every rank in its own process group, logging to ``rank-<i>.log``; a rank dies with
   its runner (``PR_SET_PDEATHSIG``);
3. on SIGTERM forwards SIGTERM to the ranks and kills them after the grace period; if one rank
   fails, stops the others the same way (a gang lives and dies together);
4. writes ``RUN_DIR/exit.json`` atomically (``{"rc": ..., "stopped": ..., "ranks": [...]}``);
   ``rc`` is the status of the rank that failed first (the cause), else 0.

The runner lives in its own session, so it outlives a killed service; the restarted service
reads the marker and the exit file to adopt it.
"""

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _claim(run_dir: str) -> bool:
    tmp = os.path.join(run_dir, f".marker.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    try:
        os.link(tmp, os.path.join(run_dir, "marker"))
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def main(run_dir: str) -> int:
    with open(os.path.join(run_dir, "launch.json")) as f:
        launch = json.load(f)
    if not _claim(run_dir):
        return 0
    grace_s = float(launch["grace_s"])
    procs: list[subprocess.Popen[bytes]] = []
    stopping = {"requested": False, "escalated": False}

    def kill_all(sig: int) -> None:
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)

    def on_alarm(_signum: int, _frame: object) -> None:
        stopping["escalated"] = True
        kill_all(signal.SIGKILL)

    def stop_gang() -> None:
        if not stopping["escalated"]:
            kill_all(signal.SIGTERM)
            signal.setitimer(signal.ITIMER_REAL, max(grace_s, 0.01))

    def on_term(_signum: int, _frame: object) -> None:
        stopping["requested"] = True
        stop_gang()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    for i, env in enumerate(launch["ranks"]):
        log = open(os.path.join(run_dir, f"rank-{i}.log"), "wb")  # noqa: SIM115
        procs.append(subprocess.Popen(
            launch["argv"], env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, process_group=0, preexec_fn=_die_with_parent))
        log.close()
    with open(os.path.join(run_dir, "ranks.json"), "w") as f:
        json.dump([p.pid for p in procs], f)
    if stopping["requested"]:
        stop_gang()
    codes: dict[int, int] = {}
    cause: list[int] = []  # the rank whose failure brought the gang down, if any
    while len(codes) < len(procs):
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        for i, p in enumerate(procs):
            if p.pid == pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                codes[i] = p.returncode
                if p.returncode != 0 and not stopping["requested"] and not cause:
                    cause.append(i)
                    stop_gang()
    signal.setitimer(signal.ITIMER_REAL, 0)
    ranks = [codes.get(i, -1) for i in range(len(procs))]
    rc = ranks[cause[0]] if cause else next((c for c in ranks if c != 0), 0)
    tmp = os.path.join(run_dir, "exit.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"rc": rc, "stopped": stopping["requested"], "ranks": ranks}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(run_dir, "exit.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
