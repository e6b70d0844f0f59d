"""Rank logs are private, bounded and removed after their retention (issue 30, finding 2 and
the kept-forever stdout of finding 6), on both executors.

* private: one run-as job cannot read another's log (``ZETA_SECRET_TOKEN=hunter2``), every
  directory of the runs tree is ``0700`` and every file ``0600``, and under Ray nothing goes to
  the shared ``/tmp/tessera-ray-logs`` any more;
* bounded: a job writing past the cap keeps running to exit 0, its log is the cap's bytes and
  one marker line;
* retention: a finished run's directory goes once its retention passed, a running one stays;
  ``tessera job`` says when the logs go.

The Ray tests (``-m ray``) share one two-node cluster (``ray_nodes.py``): the T4 job's rank runs
on the second node, whose host creates the run's directories itself.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.live.executors.base import LaunchSpec, RunStatus
from tessera.live.executors.guardian import TRUNCATED_MARKER
from tessera.live.executors.local import LocalExecutor
from tessera.live.executors.logs import LogSettings
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import wait_for

SECRET = "ZETA_SECRET_TOKEN=hunter2"
CAP = 65536
WRITES_BYTES = 1 << 20  # 16 times the cap
MARKER = TRUNCATED_MARKER.format(cap=CAP)
#: Writes 1 MiB of 'x' lines (63 x's and a newline), then says it went on.
FLOOD = ("import sys\n"
         f"for _ in range({WRITES_BYTES // 64}): sys.stdout.write('x' * 63 + '\\n')\n"
         "sys.stdout.flush()\nsys.stderr.write('still running\\n')\n")
NOBODY = "nobody"


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory others may pass through (``0711``, as a work root is), below ``/tmp``
    (pytest's own temp dirs are ``0700``: a run-as job could not reach a runs dir there)."""
    root = Path(tempfile.mkdtemp(prefix="tsr-logs-", dir="/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _spec(job_id: str, argv: tuple[str, ...], tmp_path: Path, flavor: str = "V100",
          node: str = "n0", env: tuple[tuple[str, str], ...] = (),
          run_as: str | None = None) -> LaunchSpec:
    return LaunchSpec(job_id, 1, argv, env, Placement.of(resolve_flavor(flavor), ((node, 1),)),
                      str(tmp_path / "ckpt" / job_id), run_as=run_as, grace_s=1.0)


def _modes(root: Path) -> list[str]:
    """Every directory under ``root`` (itself included) not 0700, every file not 0600."""
    bad = []
    for d, _dirs, files in os.walk(root):
        for name, want in [(d, 0o700)] + [(os.path.join(d, f), 0o600) for f in files]:
            mode = stat.S_IMODE(os.lstat(name).st_mode)
            if mode != want:
                bad.append(f"{name}: {mode:04o}")
    return bad


def _capped(text: str) -> None:
    """The log of a FLOOD job: exactly the cap's bytes of output (whole lines: 1,024 of 64
    bytes), then the marker line."""
    body, _, rest = text.partition(MARKER)
    assert rest == "\n" and len(body.encode()) == CAP, (len(body), rest[:80])
    assert body.endswith("\n") and set(body) <= {"x", "\n"}


def _wait_exit(status: Any, timeout_s: float = 60.0) -> RunStatus:
    got: list[RunStatus] = []

    def ended() -> bool:
        got[:] = [status()]
        return got[0].state == "exited"

    wait_for(ended, timeout_s, "the run to exit")
    return got[0]


# -- local executor ------------------------------------------------------------------------------


def test_local_run_as_job_cannot_read_another_jobs_log_and_the_tree_is_private(
        open_root: Path) -> None:
    ex = LocalExecutor(open_root / "runs", grace_s=1.0)
    ex.launch(_spec("zeta", ("sh", "-c", f"echo {SECRET}"), open_root, run_as=NOBODY))
    assert _wait_exit(lambda: ex.status("zeta", 1)).exit_code == 0
    victim = ex.run_dir("zeta", 1) / "rank-0.log"
    assert SECRET in victim.read_text()
    ex.launch(_spec("thief", ("sh", "-c", f"cat {victim}; echo rc=$?"), open_root,
                    run_as=NOBODY))
    assert _wait_exit(lambda: ex.status("thief", 1)).exit_code == 0
    stolen = (ex.run_dir("thief", 1) / "rank-0.log").read_text()
    assert "Permission denied" in stolen and SECRET not in stolen
    assert _modes(open_root / "runs") == []


def test_local_job_past_the_cap_keeps_running_and_its_log_is_cap_plus_marker(
        tmp_path: Path) -> None:
    import sys

    ex = LocalExecutor(tmp_path / "runs", grace_s=1.0, logs=LogSettings(cap_bytes=CAP))
    then = f"open({str(tmp_path / 'done')!r}, 'w').write('done')"
    ex.launch(_spec("flood", (sys.executable, "-c", FLOOD + then), tmp_path))
    st = _wait_exit(lambda: ex.status("flood", 1))
    assert st.exit_code == 0 and (tmp_path / "done").read_text() == "done"
    log = ex.run_dir("flood", 1) / "rank-0.log"
    assert log.stat().st_size == CAP + len(MARKER) + 1  # the cap, the marker line
    _capped(log.read_text())


def test_local_retention_removes_old_finished_runs_and_keeps_running_ones(
        tmp_path: Path) -> None:
    """Through the service's loop: a run that ended more than ``retention_s`` ago goes (its
    job's directory too), a run still running stays however old its files are."""
    from tessera.live.service import LiveService, ServiceOptions
    from tessera.live.spec import parse_request
    from tessera.live.store import Store
    from tessera.live.tenancy import Principal, load_tenancy
    from tessera.model.cluster import load_cluster
    from tests.live.helpers import write_config

    state, work = tmp_path / "state", tmp_path / "work"
    write_config(state)
    logs = LogSettings(cap_bytes=CAP, retention_s=1.0)
    ex = LocalExecutor(work / "runs", grace_s=1.0, logs=logs)
    svc = LiveService(Store(state / "state.db"), ex, load_cluster("v100:4", 4),
                      load_tenancy(state), "fifo", work,
                      ServiceOptions(period_s=0.5, poll_s=0.05, grace_s=1.0, log_sweep_s=0.2))
    admin = Principal("admin", None)
    svc.start()
    try:
        done = svc.submit(parse_request("name: d\nqueue: team-a\ncommand: echo bye"),
                          admin).job_id
        busy = svc.submit(parse_request("name: b\nqueue: team-a\ncommand: sleep 60"),
                          admin).job_id
        wait_for(lambda: ex.run_dir(busy, 1).exists() and ex.status(busy, 1).state == "running",
                 30, "the long job to run")
        old_s = time.time() - 3600  # the running run's files look an hour old
        for f in ex.run_dir(busy, 1).iterdir():
            os.utime(f, (old_s, old_s))
        os.utime(ex.run_dir(busy, 1), (old_s, old_s))
        wait_for(lambda: not (work / "runs" / done).exists(), 30,
                 "the finished run's directory to be removed")
        assert ex.status(busy, 1).state == "running"
        assert (ex.run_dir(busy, 1) / "rank-0.log").exists()
        assert ex.remove_expired(time.time() + 86400) == 0  # running: never removed
    finally:
        svc.stop()
    # The finished run's record is still in the store; only its files went.
    rec = svc.store.get(done)
    assert rec is not None and rec.state.value == "succeeded"


def test_tessera_job_shows_when_the_logs_are_removed(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from tessera.cli.job_text import job_lines
    from tessera.live.api import create_app
    from tests.live.helpers import ADMIN, auth, make_service

    svc = make_service(tmp_path / "state")
    try:
        api = TestClient(create_app(svc))
        r = api.post("/api/jobs", json={"name": "j", "command": "true", "gpus": 1,
                                        "queue": "team-a"}, headers=auth(ADMIN))
        job_id = r.json()["job_id"]
        wait_for(lambda: api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()["final"],
                 30, "the job to finish")
        job = api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()
    finally:
        svc.stop()
    week = 7 * 86400.0
    assert job["log_retention_s"] == week
    assert job["logs_removed_s"] == pytest.approx(job["finished_s"] + week)
    text = "\n".join(job_lines(job, now_s=job["finished_s"] + 60))
    assert "logs: kept until " in text and "(7d 00h after the job finished" in text
    text = "\n".join(job_lines(job, now_s=job["finished_s"] + week + 60))
    assert "logs: removed " in text
    running = {**job, "logs_removed_s": None, "final": False, "finished_s": None}
    assert "logs: kept 7d 00h after each run ends" in "\n".join(job_lines(running, 0.0))


# -- Ray, two nodes --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_ex() -> Iterator[Any]:
    """A RayExecutor on a head (1 "V100") and a second node (1 "T4"), logs capped at CAP and
    kept an hour; its runs dir is a fresh work root's ``runs/`` as ``tessera serve`` lays it
    out."""
    pytest.importorskip("ray")
    from tessera.live.executors.ray.cluster import use_token_file
    from tessera.live.executors.ray.executor import RayExecutor
    from tessera.live.layout import Layout, prepare
    from tessera.model.cluster import load_cluster
    from tests.live.ray_nodes import RayNodes

    mp = pytest.MonkeyPatch()
    nodes = RayNodes()
    base = Path(tempfile.mkdtemp(prefix="tsr-logs-", dir="/tmp"))
    base.chmod(0o711)  # a run-as job may pass through to the work root, as in production
    layout = Layout.of(base / "state")
    prepare(layout)
    ex = None
    try:
        nodes.add_head(1, {"accelerator_type:V100": 1.0})
        nodes.add_node(1, {"accelerator_type:T4": 1.0})
        mp.setenv("RAY_AUTH_MODE", "token")
        mp.setenv("RAY_AUTH_TOKEN_PATH", str(nodes.token_file))
        use_token_file(nodes.token_file)
        ex = RayExecutor(load_cluster("v100:1,t4:1", 1), nodes.address, layout.runs_dir,
                         grace_s=1.0, logs=LogSettings(cap_bytes=CAP, retention_s=3600.0))
        wait_for(lambda: len([n for n in __import__("ray").nodes() if n["Alive"]]) == 2, 60,
                 "both Ray nodes")
        yield ex
    finally:
        if ex is not None:
            ex.close()
        nodes.stop()
        mp.undo()
        shutil.rmtree(base, ignore_errors=True)


def _ray_exit(ex: Any, job_id: str) -> RunStatus:
    return _wait_exit(lambda: ex.status(job_id, 1), 120)


@pytest.mark.ray
def test_ray_run_as_job_cannot_read_another_queues_log(ray_ex: Any, tmp_path: Path) -> None:
    """The finding: a ``nobody`` job read another queue's secret from its Ray rank log. The
    victim runs on the head, the thief on the second node; the thief tries the log where it
    is now and where it used to be (``/tmp/tessera-ray-logs``)."""
    ex = ray_ex
    assert pwd.getpwnam(NOBODY)
    zeta, thief = _id("zeta"), _id("thief")
    ex.launch(_spec(zeta, ("sh", "-c", f"echo {SECRET}"), tmp_path, "V100", "n0",
                    run_as=NOBODY))
    assert _ray_exit(ex, zeta).exit_code == 0
    runs = ex.runs_dir
    new = runs / zeta / "1" / "rank-0.log"
    old = Path(f"/tmp/tessera-ray-logs/{zeta}/1/rank-0.log")
    chunk = ex.read_log(zeta, 1, 0, 0, 4096)
    assert chunk is not None and SECRET in chunk.text
    ex.launch(_spec(thief, ("sh", "-c", f"cat {new} {old}; ls {runs}; echo done"),
                    tmp_path, "T4", "n1", run_as=NOBODY))
    assert _ray_exit(ex, thief).exit_code == 0
    stolen = ex.read_log(thief, 1, 0, 0, 65536)
    assert stolen is not None and "done" in stolen.text, stolen
    assert SECRET not in stolen.text and "Permission denied" in stolen.text, stolen.text
    assert new.exists() and SECRET in new.read_text()
    assert (runs / thief / "1" / "rank-0.log").exists()  # made by the second node's host
    assert _modes(runs) == []
    assert not Path(f"/tmp/tessera-ray-logs/{zeta}").exists()
    assert not Path(f"/tmp/tessera-ray-logs/{thief}").exists()
    ex.release(zeta, 1)
    ex.release(thief, 1)


@pytest.mark.ray
def test_ray_job_past_the_cap_keeps_running_and_its_log_is_cap_plus_marker(
        ray_ex: Any, tmp_path: Path) -> None:
    import sys

    ex, flood = ray_ex, _id("flood")
    ex.launch(_spec(flood, (sys.executable, "-c", FLOOD), tmp_path, "T4", "n1"))
    st = _ray_exit(ex, flood)
    assert st.exit_code == 0, st
    chunk = ex.read_log(flood, 1, 0, 0, 2 * CAP)
    assert chunk is not None and chunk.size_bytes == CAP + len(MARKER) + 1
    _capped(chunk.text)
    ex.release(flood, 1)


@pytest.mark.ray
def test_ray_retention_removes_old_finished_runs_on_every_node_and_keeps_running_ones(
        ray_ex: Any, tmp_path: Path) -> None:
    """Each node's host removes the finished runs' directories it keeps once their retention
    passed (the executor's clock is moved two hours on); a running run's stays, though the
    other node's host sees its directory too (both nodes share this machine's disk)."""
    ex = ray_ex
    old_a, old_b, busy = _id("old-a"), _id("old-b"), _id("busy")
    for job, flavor, node in ((old_a, "V100", "n0"), (old_b, "T4", "n1")):
        ex.launch(_spec(job, ("true",), tmp_path, flavor, node))
        assert _ray_exit(ex, job).exit_code == 0
        ex.release(job, 1)
    ex.launch(_spec(busy, ("sleep", "120"), tmp_path, "V100", "n0"))
    wait_for(lambda: ex.status(busy, 1).state == "running", 120, "the long run to start")
    runs = ex.runs_dir
    wait_for(lambda: all((runs / j / "1" / "rank-0.exit.json").exists()
                         for j in (old_a, old_b)), 60, "the exit records to be kept")
    ex.remove_expired(time.time() + 7200)
    wait_for(lambda: not (runs / old_a).exists() and not (runs / old_b).exists(), 60,
             "the finished runs' directories to be removed")
    time.sleep(1.0)  # both hosts have swept by now
    assert (runs / busy / "1" / "rank-0.log").exists()
    assert ex.status(busy, 1).state == "running"
    ex.stop(busy, 1, 0.0)
    _ray_exit(ex, busy)
    ex.release(busy, 1)


def test_logs_settings_come_from_tessera_live_yaml_and_bad_ones_are_one_line(
        tmp_path: Path) -> None:
    import yaml

    from tessera.errors import SpecError
    from tessera.live.tenancy import CONFIG_NAME, load_tenancy
    from tests.live.helpers import write_config

    write_config(tmp_path)
    path = tmp_path / CONFIG_NAME
    assert load_tenancy(tmp_path).logs == LogSettings()  # 100 MiB, 7 days
    cfg = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**cfg, "logs": {"cap_bytes": CAP, "retention_s": 60}}))
    assert load_tenancy(tmp_path).logs == LogSettings(cap_bytes=CAP, retention_s=60.0)
    path.write_text(yaml.safe_dump({**cfg, "logs": {"cap_bytes": 10}}))
    with pytest.raises(SpecError, match=r"logs\.cap_bytes: .*greater than or equal to 1024"
                       ) as e:
        load_tenancy(tmp_path)
    assert "\n" not in str(e.value)
