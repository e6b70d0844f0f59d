"""Runs that fail, workers that die, preemption with checkpoint and resume."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service, wait_for

ADMIN = Principal("admin", None)


def _submit(svc: LiveService, text: str) -> str:
    return svc.store.get(svc.submit(parse_request(text), ADMIN).job_id).job_id  # type: ignore[union-attr]


def _final(svc: LiveService, job_id: str) -> bool:
    rec = svc.store.get(job_id)
    return rec is not None and rec.final


def test_command_that_fails_at_once_uses_its_retries(service: LiveService) -> None:
    jid = _submit(service, "name: bad\nqueue: team-a\ncommand: exit 3\nmax_retries: 2")
    wait_for(lambda: _final(service, jid), what="the job to give up")
    rec = service.store.get(jid)
    assert rec is not None and rec.state.value == "failed" and rec.attempts == 3
    assert rec.exit_code == 3 and "failed after 3 run(s)" in rec.reason
    states = [e.to_state for e in service.store.events(jid) if e.to_state]
    assert states == ["pending"] + ["admitted", "running", "failed", "pending"] * 2 + [
        "admitted", "running", "failed"]


def test_worker_killed_mid_run_is_retried(service: LiveService, tmp_path: Path) -> None:
    out = tmp_path / "done.txt"
    jid = _submit(service, f"name: victim\nqueue: team-a\ngpus: 2\nmax_retries: 1\n"
                           f"command: sleep 2 && echo $RANK >> {out}")
    ranks_file = service.work_dir / "runs" / jid / "1" / "ranks.json"
    wait_for(ranks_file.exists, what="ranks to start")
    pids = json.loads(ranks_file.read_text())
    os.killpg(pids[1], signal.SIGKILL)  # rank 1 dies; the gang fails and is retried
    wait_for(lambda: _final(service, jid), what="the retry to finish")
    rec = service.store.get(jid)
    assert rec is not None and rec.state.value == "succeeded" and rec.attempts == 1
    assert sorted(out.read_text().split()) == ["0", "1"]  # only the second run finished
    first = service.store.allocation(jid, 1)
    assert first is not None and first.exit_code == -signal.SIGKILL


CHECKPOINTING_JOB = """
import os, pathlib, signal, sys, time
ckpt = pathlib.Path(os.environ["TESSERA_CHECKPOINT_DIR"]) / "state"
log = pathlib.Path(sys.argv[1])
start = int(ckpt.read_text()) if ckpt.exists() else 0
log.open("a").write(f"start {start} run {os.environ['TESSERA_RUN']}\\n")
step = start
def on_term(*_):
    ckpt.write_text(str(step)); log.open("a").write(f"checkpoint {step}\\n"); sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
while step < start + 40 and step < 60:
    time.sleep(0.05); step += 1
log.open("a").write(f"done {step}\\n")
"""


def test_preemption_checkpoints_and_resumes(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(CHECKPOINTING_JOB)
    log = tmp_path / "log.txt"
    svc = make_service(tmp_path / "state", cluster="v100:1", policy="srtf",
                       gpus_per_server=1)
    try:
        long_id = _submit(svc, f"name: long\nqueue: team-a\nexpected_duration_s: 1000\n"
                               f"command: [{sys.executable}, {script}, {log}]")
        wait_for(lambda: log.exists() and "start 0" in log.read_text(), what="long job start")
        short_id = _submit(svc, "name: short\nqueue: team-b\nexpected_duration_s: 1\n"
                                "command: sleep 0.3")
        wait_for(lambda: _final(svc, long_id) and _final(svc, short_id), what="both jobs")
        lines = log.read_text().splitlines()
        assert lines[0] == "start 0 run 1" and lines[1].startswith("checkpoint ")
        saved = int(lines[1].split()[1])
        assert lines[2] == f"start {saved} run 2"  # resumed from its checkpoint
        states = [e.to_state for e in svc.store.events(long_id) if e.to_state]
        assert states == ["pending", "admitted", "running", "preempted", "pending",
                          "admitted", "running", "succeeded"]
        assert svc.store.get(long_id).attempts == 0  # type: ignore[union-attr]
    finally:
        svc.stop()
