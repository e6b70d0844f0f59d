"""The job store is never silently replaced (issue 30, finding 4).

Each way a store can be lost or damaged while the service is stopped -- emptied, deleted (with
and without its WAL), cut in half, a bad header, read-only, a damaged page in the middle,
swapped for another store or an older copy -- makes ``tessera serve`` refuse in one line
(exit 2) and leaves every byte of what is there untouched; ``--new-store`` starts afresh and
keeps the old files aside. A store damaged under a running service stops its decisions, keeps
serving what it can read and never answers 500. ``tessera admin backup`` copies a running
service's store and ``restore`` puts it back.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tessera.live import server
from tessera.live.api import create_app
from tessera.live.layout import StateLock
from tessera.live.server import ServeConfig, build_service
from tessera.live.service import LiveService
from tessera.live.spec import JobRequest, parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import ADMIN, TEAM_A, auth, make_service, wait_for

runner = CliRunner()
ADMIN_P = Principal("admin", None)
PROBE = "store-integrity-probe"  # the jobs' name: finds their rows in the file's pages
PAGE_LEAF_TABLE = 0x0D


@pytest.fixture
def app() -> typer.Typer:
    from tessera.cli import app as tessera_app

    return tessera_app


@pytest.fixture(autouse=True)
def no_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` starts, then returns at once instead of running uvicorn."""
    monkeypatch.setattr(server, "run_http", lambda *_a: None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(app: typer.Typer, state: Path, *more: str) -> tuple[int, str]:
    r = runner.invoke(app, ["serve", "--state", str(state), "--port", str(_free_port()),
                            "-c", "v100:4", *more])
    return r.exit_code, r.output


def _request(gpus: int = 1, queue: str = "default") -> JobRequest:
    return parse_request(f"name: {PROBE}\nqueue: {queue}\ngpus: {gpus}\ncommand: sleep 600\n"
                         "env:\n  SOME_SETTING: '" + "v" * 200 + "'\n")


def _stored(state: Path, jobs: int) -> list[str]:
    """A state dir whose store ``tessera serve`` made, holding ``jobs`` jobs, after a clean
    stop; their ids."""
    svc, _ = build_service(ServeConfig(state, "v100:4", 4))
    ids: list[str] = []
    for start in range(0, jobs, 200):
        recs = svc.store_jobs([svc.admit(_request(), ADMIN_P)
                               for _ in range(min(200, jobs - start))])
        ids += [r.job_id for r in recs]
    svc.stop()
    svc.store.close()
    return ids


def _files(state: Path) -> dict[str, bytes]:
    """Every file of the state dir (and of its aside folders), by relative path."""
    return {str(p.relative_to(state)): p.read_bytes() for p in sorted(state.rglob("*"))
            if p.is_file() and p.name != "serve.lock"}


def _with_wal(state: Path) -> None:
    """Leave the store as a killed service does: a WAL holding the last commits beside it."""
    db = state / "state.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("UPDATE jobs SET reason='after the last checkpoint'")
    image = {p.name: p.read_bytes() for p in state.glob("state.db*")}
    conn.close()  # checkpoints and removes the WAL: put the image back as it was
    for name, data in image.items():
        (state / name).write_bytes(data)
        (state / name).chmod(0o600)
    assert (state / "state.db-wal").stat().st_size > 0


def _middle_job_page(db: Path, skip: int = 0) -> int:
    """The byte offset of a page in the middle of ``db`` that holds jobs' rows."""
    page = int.from_bytes(db.read_bytes()[16:18], "big")
    data = db.read_bytes()
    pages = len(data) // page
    order = sorted(range(1, pages), key=lambda i: abs(i - pages // 2))
    found = [i * page for i in order if data[i * page] == PAGE_LEAF_TABLE and
             PROBE.encode() in data[i * page:(i + 1) * page]]
    assert len(found) > skip, "no page of jobs' rows found"
    return found[skip]


def _damage_page(db: Path, offset: int) -> None:
    """Overwrite a page's b-tree header (type, free block, cell count ...) with 0xFF."""
    with db.open("r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * 8)


def _truncate(to: Callable[[int], int]) -> Callable[[Path], None]:
    def damage(state: Path) -> None:
        db = state / "state.db"
        os.truncate(db, to(db.stat().st_size))
    return damage


def _emptied_with_wal(state: Path) -> None:
    _with_wal(state)
    os.truncate(state / "state.db", 0)


def _deleted_with_wal(state: Path) -> None:
    _with_wal(state)
    (state / "state.db").unlink()


def _other_store(state: Path) -> None:
    other = state.parent / "other"
    _stored(other, 5)
    shutil.copyfile(other / "state.db", state / "state.db")


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "emptied": (_truncate(lambda _n: 0), "is empty (0 bytes), but"),
    "emptied-with-wal": (_emptied_with_wal, "is empty (0 bytes), but"),
    "deleted": (lambda s: (s / "state.db").unlink(), "is missing, but"),
    "deleted-with-wal": (_deleted_with_wal, "is missing, but"),
    "half-truncated": (_truncate(lambda n: n // 2), "is truncated"),
    "bad-header": (lambda s: _damage_page(s / "state.db", 0), "bad header"),
    "read-only": (lambda s: (s / "state.db").chmod(0o400), "is read-only"),
    "damaged-middle-page": (lambda s: _damage_page(s / "state.db",
                                                   _middle_job_page(s / "state.db")),
                            "is damaged (integrity_check: "),
    "swapped": (_other_store, "is not the one this service kept"),
}


@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_lost_or_damaged_store_is_refused_in_one_line_and_kept(
        app: typer.Typer, tmp_path: Path, case: str) -> None:
    state = tmp_path / "state"
    jobs = _stored(state, 1000 if case == "damaged-middle-page" else 30)
    damage, expected = DAMAGES[case]
    damage(state)
    before = _files(state)
    code, out = _serve(app, state)
    assert code == 2, out
    line = out.strip()
    assert "\n" not in line and "Traceback" not in out, out
    assert line.startswith("error: refusing to start: the job store "), line
    assert expected in line, line
    assert ("chmod 600" in line) if case == "read-only" else ("--new-store" in line), line
    assert _files(state) == before  # nothing was changed, created or removed
    if case == "read-only":
        (state / "state.db").chmod(0o600)
        assert _serve(app, state)[0] == 0
        return
    code, out = _serve(app, state, "--new-store")  # afresh, on purpose
    assert code == 0, out
    assert "--new-store: moved the old job store to " in out
    (aside,) = state.glob("store-aside-*")
    assert aside.stat().st_mode & 0o777 == 0o700
    assert {f"{aside.name}/{k}": v for k, v in before.items()
            if k.startswith("state.db") or k == "store.marker"} \
        == {k: v for k, v in _files(state).items() if k.startswith(aside.name)}
    svc, _ = build_service(ServeConfig(state))
    assert svc.store.jobs() == [] and len(jobs) > 0
    svc.store.close()
    assert _serve(app, state)[0] == 0  # and the new store is the one it keeps from now on


def test_an_older_copy_of_the_store_is_refused(app: typer.Typer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _stored(state, 10)
    old = (state / "state.db").read_bytes()
    svc, _ = build_service(ServeConfig(state))
    svc.store_jobs([svc.admit(_request(), ADMIN_P) for _ in range(5)])
    svc.stop()
    svc.store.close()
    (state / "state.db").write_bytes(old)
    code, out = _serve(app, state)
    assert code == 2 and out.count("\n") == 1, out
    assert "holds 10 job(s) but the service had stored 15" in out
    assert "truncated or replaced by an older copy" in out


def test_a_first_start_just_works_and_records_its_store(app: typer.Typer,
                                                       tmp_path: Path) -> None:
    import json

    state = tmp_path / "state"
    assert _serve(app, state)[0] == 0
    marker = state / "store.marker"
    assert marker.stat().st_mode & 0o777 == 0o600
    recorded = json.loads(marker.read_text())
    db = sqlite3.connect(state / "state.db")
    assert db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()[0] \
        == recorded["store_id"] and recorded["jobs"] == 0
    db.close()
    assert _serve(app, state)[0] == 0  # a restart finds what it recorded


def test_the_marker_follows_the_jobs_as_they_are_added(tmp_path: Path) -> None:
    import json

    state = tmp_path / "state"
    svc, _ = build_service(ServeConfig(state, "v100:4", 4))
    svc.store_jobs([svc.admit(_request(), ADMIN_P) for _ in range(7)])
    assert svc.keeper is not None
    svc.keeper.tick(time.time() + 60)  # what the loop does every couple of seconds
    assert json.loads((state / "store.marker").read_text())["jobs"] == 7
    svc.store_jobs([svc.admit(_request(), ADMIN_P) for _ in range(3)])
    svc.stop()  # and at a clean stop
    svc.store.close()
    assert json.loads((state / "store.marker").read_text())["jobs"] == 10


def test_a_store_deleted_under_the_running_service_stops_it_deciding(tmp_path: Path) -> None:
    state = tmp_path / "state"
    svc, _ = build_service(ServeConfig(state, "v100:4", 4))
    try:
        (state / "state.db").unlink()
        assert svc.keeper is not None
        svc.keeper.tick(time.time() + 60)
        assert svc.store.fault == f"{state / 'state.db'} was deleted while the service ran"
        from tessera.live.store import StoreDamaged

        with pytest.raises(StoreDamaged, match="refuses writes"):
            svc.submit(_request(), ADMIN_P)
    finally:
        svc.stop()
        svc.store.close()


# -- a store damaged under the running service -------------------------------------------------


@pytest.fixture
def busy_service(tmp_path: Path) -> Iterator[LiveService]:
    """A running service with 2 jobs running and 400 waiting (4-GPU jobs on 8 GPUs)."""
    svc = make_service(tmp_path / "state", policy="fifo")
    svc.store_jobs([svc.admit(_request(4, "team-a"), Principal("a", "team-a"))
                    for _ in range(402)])
    wait_for(lambda: svc.store.count_jobs().get("running", 0) == 2, 20, "2 running jobs")
    yield svc
    svc.stop()


def test_damage_found_while_running_stops_decisions_and_never_answers_500(
        busy_service: LiveService, caplog: pytest.LogCaptureFixture) -> None:
    svc = busy_service
    first = svc.store.jobs(limit=None)[0].job_id
    db = svc.store.path
    time.sleep(1.0)  # reasons settle: later rounds rewrite no job row
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("PRAGMA busy_timeout=5000")
    assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    _damage_page(db, _middle_job_page(db))
    # Another connection's commit makes the service's connection drop its page cache, so its
    # next read of that page reads the damaged file, as after a disk error.
    other.execute("INSERT OR REPLACE INTO meta VALUES ('poke', '1')")
    other.close()
    caplog.set_level(logging.INFO)
    with TestClient(create_app(svc)) as api:
        wait_for(lambda: api.get("/healthz").status_code == 503, 10,
                 "the loop to find the damaged page and /healthz to say so")
        rounds = svc.rounds
        health = api.get("/healthz")
        assert health.json()["store"] == "failed" and not health.json()["ok"]
        # /healthz answers anyone: it says that the store failed, not where or why.
        assert "malformed" not in health.text and str(svc.store.path) not in health.text
        body = {"name": "x", "queue": "team-a", "gpus": 1, "command": "true"}
        for method, path, kwargs in (("POST", "/api/jobs", {"json": body}),
                                     ("POST", f"/api/jobs/{first}/cancel", {}),
                                     ("DELETE", f"/api/jobs/{first}", {})):
            r = api.request(method, path, headers=auth(TEAM_A), **kwargs)
            assert r.status_code == 503, (path, r.text)
            assert "refuses writes" in r.json()["detail"]
            assert "malformed" in r.json()["detail"] and "tessera admin restore" in r.text
        assert api.get(f"/api/jobs/{first}", headers=auth(ADMIN)).status_code == 200
        listing = api.get("/api/jobs", headers=auth(ADMIN))  # every row: the damaged page too
        assert listing.status_code == 503 and "failed" in listing.json()["detail"]
        for path in ("/api/queues", "/api/cluster", f"/api/jobs/{first}/explain",
                     f"/api/jobs/{first}/logs", "/dashboard"):
            r = api.get(path, headers=auth(ADMIN))
            assert r.status_code in (200, 503), (path, r.status_code, r.text)
    time.sleep(1.5)  # several periods: no round, no retry storm in the log
    assert svc.rounds == rounds
    said = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(said) == 1 and "stopped deciding" in said[0].getMessage(), \
        [r.getMessage()[:200] for r in said]


# -- backups -----------------------------------------------------------------------------------


def test_backup_while_running_and_restore_give_the_same_jobs(
        app: typer.Typer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    svc, _ = build_service(ServeConfig(state, "v100:4", 4))
    svc.start()
    stop = threading.Event()

    def submit_meanwhile() -> None:
        while not stop.is_set():
            svc.store_jobs([svc.admit(_request(), ADMIN_P)])

    svc.store_jobs([svc.admit(_request(), ADMIN_P) for _ in range(50)])
    writer = threading.Thread(target=submit_meanwhile)
    writer.start()
    try:
        out = tmp_path / "backup.db"
        r = runner.invoke(app, ["admin", "backup", "--state", str(state), str(out)])
        assert r.exit_code == 0, r.output
        assert r.output.startswith("backed up ") and f"to {out} (" in r.output
        assert out.stat().st_mode & 0o777 == 0o600
        r = runner.invoke(app, ["admin", "backup", "--state", str(state), str(out)])
        assert r.exit_code == 2 and "never overwrites" in r.output
    finally:
        stop.set()
        writer.join()
    svc.stop()
    svc.store.close()
    backed = sqlite3.connect(out)
    in_backup = [tuple(r) for r in backed.execute(
        "SELECT job_id, state, spec_json FROM jobs ORDER BY seq")]
    backed.close()
    assert len(in_backup) >= 50
    svc, _ = build_service(ServeConfig(state))  # the store moves on: more jobs after the backup
    svc.store_jobs([svc.admit(_request(), ADMIN_P) for _ in range(5)])
    svc.stop()
    svc.store.close()
    r = runner.invoke(app, ["admin", "restore", "--state", str(state), str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"restored {len(in_backup)} job(s) of store ")
    assert "the old store is in " in r.output
    (aside,) = state.glob("store-aside-*")
    assert (aside / "state.db").exists() and (aside / "store.marker").exists()
    restored = sqlite3.connect(state / "state.db")
    assert [tuple(r) for r in restored.execute(
        "SELECT job_id, state, spec_json FROM jobs ORDER BY seq")] == in_backup
    restored.close()
    assert _serve(app, state)[0] == 0  # the marker was rewritten for the older store
    svc, _ = build_service(ServeConfig(state))  # (runs the backup saw running are retried)
    assert [r.job_id for r in svc.store.jobs()] == [j for j, _, _ in in_backup]
    svc.store.close()


def test_restore_refuses_a_running_service_and_a_damaged_backup(
        app: typer.Typer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _stored(state, 200)
    out = tmp_path / "backup.db"
    assert runner.invoke(app, ["admin", "backup", "--state", str(state), str(out)]).exit_code \
        == 0
    before = _files(state)
    holder = StateLock(state)
    holder.acquire()
    try:
        r = runner.invoke(app, ["admin", "restore", "--state", str(state), str(out)])
        assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
        assert r.output.startswith("error: refusing to restore: state dir ")
        assert f"in use by another tessera serve (pid {os.getpid()})" in r.output
    finally:
        holder.release()
    _damage_page(out, _middle_job_page(out))
    r = runner.invoke(app, ["admin", "restore", "--state", str(state), str(out)])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "is damaged (integrity_check: " in r.output
    out.write_bytes(b"not a database at all")
    r = runner.invoke(app, ["admin", "restore", "--state", str(state), str(out)])
    assert r.exit_code == 2 and "bad header" in r.output
    assert _files(state) == before


def test_a_store_the_service_user_cannot_read_is_refused(
        app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a service that does not run as root meets for a mode-0000 store (root reads any
    file, so the test has ``os.access`` say no, as the kernel would)."""
    from tessera.live import storecheck

    state = tmp_path / "state"
    _stored(state, 3)
    before = _files(state)
    real = os.access
    monkeypatch.setattr(storecheck.os, "access", lambda path, mode, **k: False if Path(
        path).name == "state.db" else real(path, mode, **k))
    code, out = _serve(app, state)
    assert code == 2 and out.count("\n") == 1, out
    assert "is read-only or unreadable for the service's user (mode 0600)" in out
    assert _files(state) == before


def test_removing_old_jobs_does_not_lower_the_count(app: typer.Typer, tmp_path: Path) -> None:
    """The count is how many jobs the store ever took: a later clean-up of old jobs (or of
    the newest) is not mistaken for a truncated store."""
    state = tmp_path / "state"
    _stored(state, 12)
    db = sqlite3.connect(state / "state.db")
    db.execute("DELETE FROM jobs WHERE seq > 6")
    db.commit()
    db.close()
    assert _serve(app, state)[0] == 0


def test_a_marker_that_cannot_be_written_at_stop_still_stops_the_executor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop means stopped: a busy or full store at the last marker update is logged, and the
    executor (the embedded Ray head among others) is closed all the same."""
    svc, _ = build_service(ServeConfig(tmp_path / "state", "v100:4", 4))
    closed: list[bool] = []
    monkeypatch.setattr(svc.executor, "close", lambda: closed.append(True))
    assert svc.keeper is not None

    def busy() -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(svc.keeper, "close", busy)
    svc.stop()
    svc.store.close()
    assert closed == [True]


def test_the_marker_does_not_go_with_the_stores_files(tmp_path: Path) -> None:
    """``rm state.db*`` (or moving a database with its companions) must not take the marker,
    or the next start would take an empty store for a first one."""
    state = tmp_path / "state"
    svc, _ = build_service(ServeConfig(state, "v100:4", 4))
    svc.stop()
    svc.store.close()
    marker = [p.name for p in state.iterdir() if "marker" in p.name]
    assert marker and not any(name.startswith("state.db") for name in marker)
