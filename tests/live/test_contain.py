"""Contained runs on the local executor: a run's processes never outlive it.

The scenario of issue 11: a job whose command leaves a background child (also one in a new
session), its runner killed with SIGKILL. The retry's own command checks, as it starts, which of
run 1's processes are still alive, so "run 2 started beside run 1" cannot hide behind a
cleanup that happened later.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.live.executors import contain
from tessera.live.service import LiveService
from tessera.live.spec import validate_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service, wait_for

ADMIN = Principal("admin", None)
#: Run 2's command: which of the listed (pid, start time) processes are alive right now?
CHECK = """
import json, sys
from pathlib import Path
def start(pid):
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else int(fields[19])
procs = json.loads(Path(sys.argv[1]).read_text())
Path(sys.argv[2]).write_text(json.dumps([p for p, s in procs if start(p) == s]))
"""
BACKGROUND = {"child": "sleep 300 &", "new session": "setsid sleep 300 &"}


def _submit(svc: LiveService, **fields: object) -> str:
    req = validate_request({"name": "contained", "queue": "team-a", **fields})
    return svc.submit(req, ADMIN).job_id


def _final(svc: LiveService, job_id: str) -> bool:
    rec = svc.store.get(job_id)
    return rec is not None and rec.final


def _tree(root_pid: int) -> dict[int, int]:
    """The live processes below ``root_pid`` (``pid -> start time``)."""
    return contain.tree(root_pid)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _sleeps(procs: dict[int, int]) -> list[int]:
    return [pid for pid in procs if _cmdline(pid).startswith(b"sleep\x00300")]


def _two_run_job(tmp_path: Path, background: str) -> tuple[str, Path, Path]:
    """The command for both runs: run 1 leaves ``background`` running, run 2 checks."""
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    procs, seen = tmp_path / "run1.json", tmp_path / "alive-at-run2.json"
    cmd = (f'if [ "$TESSERA_RUN" = 1 ]; then {background} sleep 300; '
           f"else python {script} {procs} {seen}; fi")
    return cmd, procs, seen


def _alive(procs: dict[int, int]) -> list[int]:
    return [p for p, s in procs.items() if contain.start_time(p) == s]


def _shutdown(svc: LiveService) -> None:
    """Stop the service and kill what its runs left (a failing test must not leak sleeps)."""
    svc.stop()
    runs = svc.work_dir / "runs"
    contain.sweep([str(d) for d in runs.glob("*/*")] if runs.exists() else [])


@pytest.mark.parametrize("background", BACKGROUND.values(), ids=BACKGROUND.keys())
def test_runner_killed_takes_its_tree_before_the_retry_starts(tmp_path: Path,
                                                              background: str) -> None:
    svc = make_service(tmp_path / "state")
    try:
        cmd, procs_file, seen = _two_run_job(tmp_path, background)
        jid = _submit(svc, command=cmd, max_retries=1)
        marker = svc.work_dir / "runs" / jid / "1" / "marker"
        wait_for(marker.exists, what="run 1's runner")
        runner = int(marker.read_text())
        wait_for(lambda: len(_sleeps(_tree(runner))) == 2, what="run 1's two sleeps")
        run1 = _tree(runner)
        procs_file.write_text(json.dumps(list(run1.items())))
        os.kill(runner, signal.SIGKILL)
        wait_for(lambda: _final(svc, jid), what="the retry to finish")
        rec = svc.store.get(jid)
        assert rec is not None and rec.state.value == "succeeded" and rec.attempts == 1
        assert json.loads(seen.read_text()) == []  # nothing of run 1 was alive at run 2's start
        assert _alive(run1) == []
    finally:
        _shutdown(svc)


def test_processes_left_by_a_killed_guardian_are_swept_after_a_restart(tmp_path: Path) -> None:
    """Runner and guardian both SIGKILLed (frozen first, so neither cleans up), the service
    restarted: run 2 still starts only after run 1's orphans are gone."""
    svc = make_service(tmp_path / "state")
    cmd, procs_file, seen = _two_run_job(tmp_path, "setsid sleep 300 &")
    jid = _submit(svc, command=cmd, max_retries=1)
    run_dir = svc.work_dir / "runs" / jid / "1"
    wait_for((run_dir / "ranks.json").exists, what="run 1's ranks")
    runner = int((run_dir / "marker").read_text())
    wait_for(lambda: set(_sleeps(_tree(runner))) <= set(contain.recorded([str(run_dir)]))
             and len(_sleeps(_tree(runner))) == 2, what="run 1's sleeps to be recorded")
    run1 = _tree(runner)
    procs_file.write_text(json.dumps(list(run1.items())))
    svc.stop()
    keepers = [runner, *(p for p in run1 if b"contain.py" in _cmdline(p))]  # runner, guardian
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in keepers:
            os.kill(pid, sig)
    wait_for(lambda: set(_alive(run1)) == set(_sleeps(run1)), what="the orphaned sleeps alone")
    svc = make_service(tmp_path / "state")
    try:
        wait_for(lambda: _final(svc, jid), what="the retry to finish")
        rec = svc.store.get(jid)
        assert rec is not None and rec.state.value == "succeeded"
        assert json.loads(seen.read_text()) == []
        assert _alive(run1) == []
    finally:
        _shutdown(svc)


def test_leftover_children_die_when_the_command_ends(service: LiveService) -> None:
    jid = _submit(service, command="setsid sleep 300 & sleep 300 & echo started")
    wait_for(lambda: _final(service, jid), what="the job to finish")
    rec = service.store.get(jid)
    assert rec is not None and rec.state.value == "succeeded"
    run_dir = service.work_dir / "runs" / jid / "1"
    runner = int((run_dir / "marker").read_text())
    wait_for(lambda: contain.start_time(runner) is None, what="the runner to exit")
    assert _alive(contain.recorded([str(run_dir)])) == []


def test_missing_binary_fails_with_the_reason_and_uses_retries(service: LiveService) -> None:
    jid = _submit(service, command=["/nonexistent/binary", "--flag"], max_retries=1)
    wait_for(lambda: _final(service, jid), what="the job to give up")
    rec = service.store.get(jid)
    why = "exec failed: No such file or directory: /nonexistent/binary"
    assert rec is not None and rec.state.value == "failed" and rec.attempts == 2
    assert why in rec.reason
    assert sum(why in e.detail for e in service.store.events(jid)) >= 2


def test_nul_byte_in_env_is_refused_before_it_reaches_a_runner(service: LiveService) -> None:
    with pytest.raises(SpecError, match="BAD contains a NUL character"):
        _submit(service, command="true", env={"BAD": "a\0b"})


def test_cancel_stops_every_process_of_the_run(service: LiveService) -> None:
    jid = _submit(service, command="setsid sleep 300 & sleep 300 & wait")
    run_dir = service.work_dir / "runs" / jid / "1"
    wait_for(lambda: len(_sleeps(contain.recorded([str(run_dir)]))) == 2,
             what="both sleeps to be recorded")
    service.cancel(jid, ADMIN)
    wait_for(lambda: (run_dir / "exit.json").exists(), what="the run to end")
    runner = int((run_dir / "marker").read_text())
    wait_for(lambda: contain.start_time(runner) is None, what="the runner to exit")
    assert _alive(contain.recorded([str(run_dir)])) == []
    assert json.loads((run_dir / "exit.json").read_text())["stopped"] is True
