"""Submissions: group commit, the short path for POST /api/jobs, and uvicorn's fast parser."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.live import server
from tessera.live.api import create_app
from tessera.live.intake import GroupCommit, admit_body
from tessera.live.service import LiveService
from tessera.live.spec import parse_request, to_live_job
from tessera.live.store import NewJob, Store
from tessera.live.tenancy import Principal
from tests.live.helpers import TEAM_A, TEAM_B, ServerThread, auth, make_service

JOB = {"name": "n", "command": "sleep 30", "gpus": 1}
TEAM_A_WHO = Principal("team-a", "team-a")


def test_records_returned_by_add_jobs_are_the_stored_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    rigid = parse_request("name: a\ncommand: 'true'\ngpus: 2")
    new = [NewJob(to_live_job(rigid, f"j-{i}", "q", 10.0 + i), 10.0 + i,
                  note="why it runs rigid" if i == 1 else "") for i in range(3)]
    recs = store.add_jobs(new)
    assert [r.seq for r in recs] == [1, 2, 3]
    fresh = Store(tmp_path / "state.db")  # decodes every row from the file
    assert recs == [fresh.get(f"j-{i}") for i in range(3)]
    assert [(e.job_id, e.kind) for e in fresh.events()] == [
        ("j-0", "submitted"), ("j-1", "submitted"), ("j-1", "rigid"), ("j-2", "submitted")]
    assert store.add_job(to_live_job(rigid, "j-9", "q", 20.0), 20.0).seq == 4


def test_submissions_of_one_loop_turn_share_one_commit(tmp_path: Path) -> None:
    service = make_service(tmp_path / "state", start=False)  # no loop: records stay as stored
    commits: list[int] = []
    real = service.store_jobs

    def counted(new: list[NewJob]) -> list:  # type: ignore[type-arg]
        commits.append(len(new))
        return real(new)

    service.store_jobs = counted  # type: ignore[method-assign]
    group = GroupCommit(service)
    body = json.dumps(JOB).encode()

    async def submit_all(n: int) -> list:  # type: ignore[type-arg]
        return await asyncio.gather(*(
            group.store(admit_body(service, body, "application/json", TEAM_A_WHO))
            for _ in range(n)))

    recs = asyncio.run(submit_all(6))
    assert commits == [6]
    assert len({r.job_id for r in recs}) == 6
    assert all(service.store.get(r.job_id) == r for r in recs)
    asyncio.run(submit_all(1))
    assert commits == [6, 1]  # a lone submission is committed alone, at once


def test_a_failed_commit_fails_every_request_of_its_group(service: LiveService) -> None:
    def broken(new: list[NewJob]) -> list:  # type: ignore[type-arg]
        raise OSError("disk full")

    service.store_jobs = broken  # type: ignore[method-assign]
    group = GroupCommit(service)
    body = json.dumps(JOB).encode()

    async def submit_two() -> list:  # type: ignore[type-arg]
        return await asyncio.gather(*(
            group.store(admit_body(service, body, "application/json", TEAM_A_WHO))
            for _ in range(2)), return_exceptions=True)

    got = asyncio.run(submit_two())
    assert [str(e) for e in got] == ["disk full", "disk full"]
    assert service.store.jobs() == []
    with TestClient(create_app(service), raise_server_exceptions=False) as api:
        r = api.post("/api/jobs", json=JOB, headers=auth(TEAM_A))
    assert r.status_code == 500 and service.store.jobs() == []


def test_short_path_answers_like_the_route(service: LiveService) -> None:
    """The same request through the short path and through the FastAPI route (a YAML body
    always takes the route) gives the same job view."""
    with TestClient(create_app(service)) as api:
        fast = api.post("/api/jobs", json=JOB, headers=auth(TEAM_A))
        routed = api.post("/api/jobs", content=b"name: n\ncommand: sleep 30\ngpus: 1\n",
                          headers={**auth(TEAM_A), "content-type": "application/yaml"})
        assert fast.status_code == routed.status_code == 201
        assert fast.headers["content-type"] == routed.headers["content-type"]
        a, b = fast.json(), routed.json()
        for key in ("job_id", "submitted_s"):
            assert a.pop(key) != b.pop(key)
        assert a == b
        got = api.get(f"/api/jobs/{fast.json()['job_id']}", headers=auth(TEAM_A)).json()
        assert got["state"] in ("pending", "admitted", "running")


@pytest.mark.parametrize(("body", "headers", "status", "detail"), [
    (JOB, {}, 401, "missing bearer token"),
    (JOB, auth("wrong"), 401, "unknown token"),
    (JOB, {"Authorization": f"Basic {TEAM_A}"}, 401, "missing bearer token"),
    ({**JOB, "queue": "team-a"}, auth(TEAM_B), 403, "may submit only to queue 'team-b'"),
    ({**JOB, "gpus": 0}, auth(TEAM_A), 422, "gpus"),
    ({**JOB, "gpus": 64}, auth(TEAM_A), 422, "rejected"),
    ({**JOB, "bogus": 1}, auth(TEAM_A), 422, "bogus"),
])
def test_refusals_keep_the_routes_status_and_message(
        service: LiveService, body: dict[str, object], headers: dict[str, str], status: int,
        detail: str) -> None:
    with TestClient(create_app(service)) as api:
        r = api.post("/api/jobs", json=body, headers=headers)
    assert r.status_code == status and detail in r.json()["detail"], r.text
    assert service.store.jobs() == []


def test_bad_json_and_lying_lengths_are_refused(server: ServerThread) -> None:
    for body, length, status in [(b"{not json", None, 400), (b"[1, 2]", None, 422),
                                 (json.dumps(JOB).encode(), "12x", 400)]:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.putrequest("POST", "/api/jobs")
        conn.putheader("Authorization", f"Bearer {TEAM_A}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", length or str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        assert r.status == status, (body, r.status, r.read())
        conn.close()


def test_concurrent_clients_none_lost(tmp_path: Path) -> None:
    """8 keep-alive clients through uvicorn: every 201 is a stored job, each stored once."""
    svc = make_service(tmp_path / "state")
    srv = ServerThread(svc)
    ids: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        for _ in range(15):
            conn.request("POST", "/api/jobs", json.dumps(JOB),
                         {**auth(TEAM_A), "Content-Type": "application/json"})
            r = conn.getresponse()
            got = json.loads(r.read())
            assert r.status == 201, got
            with lock:
                ids.append(got["job_id"])
        conn.close()

    try:
        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stored = [r.job_id for r in svc.store.jobs()]
        assert len(ids) == 120 and sorted(stored) == sorted(ids)
        assert [r.seq for r in svc.store.jobs()] == list(range(1, 121))
    finally:
        srv.stop()
        svc.stop()


def test_uvicorn_uses_the_fast_parser_and_loop_when_installed(
        service: LiveService, monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(service)
    monkeypatch.setattr(server, "_importable", lambda module: True)
    cfg = server.uvicorn_config(app)
    assert (cfg.http, cfg.loop) == ("httptools", "uvloop")
    monkeypatch.setattr(server, "_importable", lambda module: False)
    cfg = server.uvicorn_config(app)
    assert (cfg.http, cfg.loop) == ("h11", "asyncio")
    assert server.uvicorn_config(app, http="h11").http == "h11"


def test_a_3d_job_is_admitted_off_the_event_loop(service: LiveService) -> None:
    """Admitting a 3-D job plans it (seconds for a large model): on both paths it runs in a
    worker thread, never on the event loop every other request waits on; a data-parallel
    JSON submission is admitted inline."""
    from tessera.errors import SpecError

    on_loop: list[tuple[str, bool]] = []

    def admit(req, who):  # type: ignore[no-untyped-def]
        try:
            asyncio.get_running_loop()
            on_loop.append((req.parallelism, True))
        except RuntimeError:
            on_loop.append((req.parallelism, False))
        raise SpecError("recorded")

    service.admit = admit  # type: ignore[method-assign]
    three_d = {**JOB, "gpus": 2, "global_batch": 16, "model": "gpt3-1.3b", "parallelism": "3d"}
    with TestClient(create_app(service)) as api:
        for body in (JOB, three_d):
            r = api.post("/api/jobs", json=body, headers=auth(TEAM_A))
            assert r.status_code == 422 and "recorded" in r.text
    assert ("data", True) in on_loop
    assert [inline for kind, inline in on_loop if kind == "3d"] == [False]
