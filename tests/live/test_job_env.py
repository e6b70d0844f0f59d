"""What a job runs with: a clean environment, its user, its runtime limit."""

from __future__ import annotations

import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.live.executors import contain
from tessera.live.executors.base import check_run_as
from tessera.live.server import ServeConfig, build_service
from tessera.live.service import LiveService
from tessera.live.spec import validate_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service, wait_for, write_config

ADMIN = Principal("admin", None)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="run-as needs a service run as root")
QUEUES = [{"name": "team-a", "nominal_gpus": 4}, {"name": "team-b", "nominal_gpus": 4},
          {"name": "nobodys", "nominal_gpus": 4, "run_as": "nobody"},
          {"name": "short", "nominal_gpus": 4, "max_runtime_s": 1}]


def _run(svc: LiveService, queue: str = "team-a", **fields: object) -> str:
    req = validate_request({"name": "probe", "queue": queue, **fields})
    jid = svc.submit(req, ADMIN).job_id
    wait_for(lambda: svc.store.get(jid).final, what="the job to end")  # type: ignore[union-attr]
    return jid


def _shutdown(svc: LiveService) -> None:
    svc.stop()
    runs = svc.work_dir / "runs"
    contain.sweep([str(d) for d in runs.glob("*/*")] if runs.exists() else [])


@pytest.fixture
def private_root() -> Iterator[Path]:
    """A directory another user may pass through but not list, like a real state dir's home
    (pytest's own temp directories are closed to other users)."""
    d = Path(tempfile.mkdtemp(prefix="tessera-runas-"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d)


def test_job_sees_a_clean_environment_not_the_services(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_TOKEN", "service-secret-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "service-secret-key")
    monkeypatch.setenv("TZ", "UTC")
    svc = make_service(tmp_path / "state")
    try:
        jid = _run(svc, env={"MY_SETTING": "42"},
                   command='env > "$TESSERA_CHECKPOINT_DIR/env.txt"; '
                           'command -v python > "$TESSERA_CHECKPOINT_DIR/python.txt"')
        assert svc.store.get(jid).state.value == "succeeded"  # type: ignore[union-attr]
        ckpt = svc.work_dir / "checkpoints" / jid
        env = dict(line.split("=", 1) for line in (ckpt / "env.txt").read_text().splitlines()
                   if "=" in line)
    finally:
        _shutdown(svc)
    assert "service-secret" not in (ckpt / "env.txt").read_text()
    assert not {"TESSERA_TOKEN", "AWS_SECRET_ACCESS_KEY", "TESSERA_RUN_AS"} & set(env)
    bindir = os.path.dirname(sys.executable)
    assert env["PATH"].split(":")[0] == bindir
    assert (ckpt / "python.txt").read_text().strip() == os.path.join(bindir, "python")
    assert env["HOME"] == pwd.getpwuid(os.geteuid()).pw_dir and env["TZ"] == "UTC"
    assert env["MY_SETTING"] == "42" and env["RANK"] == "0" and env["TESSERA_JOB_ID"] == jid
    assert env["TESSERA_GRACE_S"] == "2" and "TESSERA_MAX_RUNTIME_S" not in env


@pytest.mark.parametrize("where", ["job", "queue"])
def test_run_over_max_runtime_is_stopped_and_fails_for_good(tmp_path: Path, where: str) -> None:
    svc = make_service(tmp_path / "state", queues=QUEUES)
    try:
        if where == "job":
            jid = _run(svc, command="sleep 30", max_runtime_s=1, max_retries=2)
        else:
            jid = _run(svc, "short", command="sleep 30", max_retries=2)
        rec = svc.store.get(jid)
        assert rec is not None and rec.state.value == "failed" and rec.attempts == 1
        assert "exceeded max_runtime_s=1" in rec.reason
        assert any("exceeded max_runtime_s=1" in e.detail and e.to_state == "failed"
                   for e in svc.store.events(jid))
        assert svc.store.allocation(jid, 2) is None  # not retried
    finally:
        _shutdown(svc)


def test_max_runtime_must_be_positive() -> None:
    with pytest.raises(SpecError, match="max_runtime_s"):
        validate_request({"name": "x", "command": "true", "max_runtime_s": 0})


def test_run_as_refuses_unknown_users_and_non_root_services(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecError, match="no-such-user-x: no such user"):
        check_run_as("no-such-user-x")
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    with pytest.raises(SpecError, match="only a service running as root"):
        check_run_as("nobody", "queue nobodys: run_as")


def test_serve_refuses_a_queue_run_as_that_does_not_exist(tmp_path: Path) -> None:
    write_config(tmp_path, [{"name": "team-a", "nominal_gpus": 4, "run_as": "no-such-user-x"},
                            {"name": "team-b", "nominal_gpus": 4}])
    with pytest.raises(SpecError, match="queue team-a: run_as no-such-user-x"):
        build_service(ServeConfig(tmp_path, cluster="v100:4"))


def _uid_of_job(svc: LiveService, queue: str, **fields: object) -> tuple[str, Path]:
    jid = _run(svc, queue, command='id -u > "$TESSERA_CHECKPOINT_DIR/uid"', **fields)
    rec = svc.store.get(jid)
    assert rec is not None and rec.state.value == "succeeded", rec
    ckpt = Path(str(fields.get("checkpoint_dir", svc.work_dir / "checkpoints" / jid)))
    return (ckpt / "uid").read_text().strip(), ckpt


@needs_root
def test_serve_run_as_runs_jobs_as_that_user_away_from_the_store(private_root: Path) -> None:
    state = private_root / "state"
    write_config(state, QUEUES)
    svc, _token = build_service(ServeConfig(state, cluster="v100:4", run_as="nobody"))
    svc.start()
    try:
        work = svc.work_dir
        probe = (f'out="$TESSERA_CHECKPOINT_DIR/seen"; : > "$out"; '
                 f'cat {state}/state.db > /dev/null 2>&1 && echo store >> "$out"; '
                 f'cat {state}/tessera-live.yaml > /dev/null 2>&1 && echo config >> "$out"; '
                 f'ls {state} > /dev/null 2>&1 && echo state >> "$out"; '
                 f'ls {work}/runs > /dev/null 2>&1 && echo runs >> "$out"; '
                 f'ls {work} > /dev/null 2>&1 && echo listing >> "$out"; true')
        jid = _run(svc, command=probe)
        uid, ckpt = _uid_of_job(svc, "team-a")
    finally:
        _shutdown(svc)
    assert int(uid) == pwd.getpwnam("nobody").pw_uid
    assert ckpt.stat().st_uid == pwd.getpwnam("nobody").pw_uid
    assert (work / "checkpoints" / jid / "seen").read_text() == ""  # nothing else reachable


@needs_root
def test_queue_run_as_applies_and_a_named_checkpoint_dir_is_made_by_the_job(
        private_root: Path) -> None:
    shared = private_root / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    svc = make_service(private_root / "state", queues=QUEUES)
    try:
        uid, ckpt = _uid_of_job(svc, "nobodys", checkpoint_dir=str(shared / "ckpt"))
        other, _ = _uid_of_job(svc, "team-a")
    finally:
        _shutdown(svc)
    nobody = pwd.getpwnam("nobody").pw_uid
    assert int(uid) == nobody and ckpt.stat().st_uid == nobody
    assert int(other) == os.geteuid()
