"""Totals bounded (issue 30, finding 5): per-queue caps on stored and unfinished jobs and
stored bytes, lean paginated listings, and a spec cache that neither grows without bound nor
holds any job's env."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.service import LiveService
from tessera.live.spec import validate_request
from tessera.live.store import Store
from tessera.live.tenancy import CONFIG_NAME, Principal, load_tenancy
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, auth, make_service

JOB = {"name": "x", "command": "true"}
#: An env of 8 values of 30,000 characters: 240 KB, well within the per-request limits.
BIG_ENV = {f"BLOB_{i}": chr(ord("a") + i) * 30_000 for i in range(8)}
BIG_ENV_BYTES = sum(len(v) for v in BIG_ENV.values())


def _queues(**team_a: object) -> list[dict[str, object]]:
    return [{"name": "team-a", "nominal_gpus": 4, "borrowing_limit_gpus": 4, **team_a},
            {"name": "team-b", "nominal_gpus": 4, "borrowing_limit_gpus": 4}]


@pytest.fixture
def capped(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[LiveService,
                                                                           TestClient]]:
    """An unstarted service (jobs stay pending) whose team-a has the caps the test names."""
    svc = make_service(tmp_path / "state", start=False, queues=_queues(**request.param))
    with TestClient(create_app(svc)) as api:
        yield svc, api
    svc.stop()


def _submit(api: TestClient, token: str = TEAM_A, **fields: Any) -> Any:
    return api.post("/api/jobs", json={**JOB, **fields}, headers=auth(token))


# -- caps ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("capped", "fields", "cap"), [
    ({"max_queued_jobs": 3}, {}, "max_queued_jobs"),
    ({"max_stored_jobs": 3}, {}, "max_stored_jobs"),
    ({"max_stored_bytes": 3 * 3000}, {"env": {"PAD": "p" * 2000}}, "max_stored_bytes"),
], indirect=["capped"], ids=["queued", "stored", "bytes"])
def test_a_tenant_over_a_cap_is_refused_naming_it_and_others_are_not(
        capped: tuple[LiveService, TestClient], fields: dict[str, Any], cap: str) -> None:
    svc, api = capped
    for _ in range(3):
        assert _submit(api, **fields).status_code == 201
    over = _submit(api, **fields)
    assert over.status_code == 429, over.text
    assert cap in over.json()["detail"] and "team-a" in over.json()["detail"]
    # YAML takes the other path through the API: the same answer.
    yaml_body = "name: x\ncommand: 'true'\n" + (
        "env: {PAD: " + "p" * 2000 + "}\n" if fields else "")
    r = api.post("/api/jobs", content=yaml_body,
                 headers={**auth(TEAM_A), "content-type": "application/yaml"})
    assert r.status_code == 429 and cap in r.json()["detail"]
    # Another tenant, and the admin submitting to another queue, are not affected.
    assert _submit(api, TEAM_B, **fields).status_code == 201
    assert _submit(api, ADMIN, queue="team-b", **fields).status_code == 201
    assert svc.store.count_jobs(queue="team-a") == {"pending": 3}


@pytest.mark.parametrize("capped", [{"max_stored_jobs": 3}], indirect=True)
def test_oldest_finished_jobs_make_room_and_unfinished_ones_never_do(
        capped: tuple[LiveService, TestClient]) -> None:
    svc, api = capped
    first = [_submit(api).json()["job_id"] for _ in range(3)]
    for jid in first[:2]:
        assert api.post(f"/api/jobs/{jid}/cancel", headers=auth(TEAM_A)).status_code == 200
    later = [_submit(api).json()["job_id"] for _ in range(2)]  # the two cancelled ones go
    kept = [r.job_id for r in svc.store.jobs(queue="team-a")]
    assert kept == [first[2], *later]
    assert api.get(f"/api/jobs/{first[0]}", headers=auth(TEAM_A)).status_code == 404
    assert svc.store.events(job_id=first[0]) == []
    pruned = [e.detail for e in svc.store.events() if e.kind == "pruned"]
    assert len(pruned) == 2 and all("1 finished job(s)" in d for d in pruned)  # one each
    r = _submit(api)  # three unfinished jobs: nothing may be deleted
    assert r.status_code == 429 and "max_stored_jobs" in r.json()["detail"]
    assert [r.job_id for r in svc.store.jobs(queue="team-a")] == kept


def test_a_queue_at_its_stored_cap_prunes_one_percent_ahead(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False, queues=_queues(max_stored_jobs=200))
    try:
        who = Principal("a", "team-a")
        req = validate_request(JOB)
        ids = [svc.submit(req, who).job_id for _ in range(200)]
        for jid in ids[:150]:
            svc.cancel(jid, who)
        svc.submit(req, who)  # needs 1; takes 1 + 200 // 100
        assert svc.store.queue_totals("team-a")[0] == 198
        assert [r.job_id for r in svc.store.jobs(queue="team-a")][:2] == ids[3:5]
        for _ in range(2):  # room already made: no pruning
            svc.submit(req, who)
        assert len([e for e in svc.store.events() if e.kind == "pruned"]) == 1
        assert svc.store.queue_totals("team-a") == (
            200, sum(len(r.job.to_json()) for r in svc.store.jobs(queue="team-a")))
    finally:
        svc.stop()


def test_a_finished_job_whose_run_still_drains_is_not_pruned(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    try:
        who = Principal("a", "team-a")
        ids = [svc.submit(validate_request(JOB), who).job_id for _ in range(3)]
        with svc.store.tx() as db:  # ids[0] has a run; then all three are cancelled
            svc.store.add_allocation(db, ids[0], 1, _placement(svc), 0.0)
            svc.store.set_allocation(db, ids[0], 1, status="running", started_s=0.0)
        for jid in ids:
            svc.cancel(jid, who)
        assert svc.store.allocation(ids[0], 1).status == "stopping"  # type: ignore[union-attr]
        gone, _ = svc.store.prune_finished("team-a", 3, 0, now_s=1.0)
        assert gone == 2
        assert [r.job_id for r in svc.store.jobs(queue="team-a")] == [ids[0]]
        assert svc.store.queue_totals("team-a")[0] == 1
    finally:
        svc.stop()


def test_no_history_is_deleted_for_a_submission_refused_anyway(tmp_path: Path) -> None:
    """A job too big for what pruning could free is refused before anything is deleted."""
    svc = make_service(tmp_path / "state", start=False,
                       queues=_queues(max_stored_bytes=40_000))
    try:
        who = Principal("a", "team-a")
        small = validate_request({**JOB, "env": {"PAD": "p" * 2000}})
        ids = [svc.submit(small, who).job_id for _ in range(4)]
        svc.cancel(ids[0], who)  # one finished job of ~2 KB; three unfinished ones
        big = validate_request({**JOB, "env": {"PAD": "p" * 18_000, "PAD2": "q" * 18_000}})
        with pytest.raises(Exception, match="max_stored_bytes"):
            svc.submit(big, who)
        assert [r.job_id for r in svc.store.jobs(queue="team-a")] == ids
        assert [e for e in svc.store.events() if e.kind == "pruned"] == []
    finally:
        svc.stop()


def test_a_failed_write_leaves_the_queue_totals_true(tmp_path: Path) -> None:
    """Totals counted inside a write that is rolled back are recounted from the store."""
    svc = make_service(tmp_path / "state", start=False)
    try:
        who = Principal("a", "team-a")
        svc.submit(validate_request(JOB), who)
        before = svc.store.queue_totals("team-a")
        with pytest.raises(RuntimeError), svc.store.tx() as db:
            svc.store._totals["team-a"][0] += 5  # as add_jobs does before COMMIT
            db.execute("DELETE FROM jobs WHERE queue='team-a'")
            raise RuntimeError("the commit fails")
        assert svc.store.queue_totals("team-a") == before
    finally:
        svc.stop()


def _placement(svc: LiveService) -> Any:
    from tessera.sched.core.snapshot import Placement

    node = svc.cluster.nodes[0]
    return Placement.of(node.flavor, ((node.node_id, 1),))


def test_caps_come_from_limits_and_each_queue_may_override(tmp_path: Path) -> None:
    from tessera.live.totals import QueueCaps

    make_service(tmp_path / "state", start=False,
                 queues=_queues(max_queued_jobs=7, max_stored_bytes=2048)).stop()
    config = tmp_path / "state" / CONFIG_NAME
    config.write_text(config.read_text()
                      + "limits: {queue_stored_jobs: 50, queue_queued_jobs: 9}\n")
    tenancy = load_tenancy(tmp_path / "state")
    assert tenancy.caps("team-a") == QueueCaps(stored_jobs=50, queued_jobs=7, stored_bytes=2048)
    assert tenancy.caps("team-b") == QueueCaps(50, 9, 256 * 1024 * 1024)
    config.write_text(config.read_text().replace("max_queued_jobs: 7", "max_queued_jobs: 0"))
    with pytest.raises(Exception, match="max_queued_jobs"):
        load_tenancy(tmp_path / "state")


# -- lean, paginated listings ----------------------------------------------------------------

def test_the_poll_and_the_listing_carry_no_command_or_env_and_are_paginated(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    try:
        with TestClient(create_app(svc)) as api:
            ids = [_submit(api, name=f"j{i}", command="x" * 8100, env={"SECRET": "hunter2"}
                           ).json()["job_id"] for i in range(300)]
            poll = api.get("/api/jobs?limit=200", headers=auth(TEAM_A))  # the dashboard's
            assert poll.status_code == 200
            # 200 jobs with 8,100-character commands were 1.7 MB; a summary is ~500 bytes.
            assert len(poll.content) < 200 * 1000, len(poll.content)
            assert "hunter2" not in poll.text and "xxxxxxxx" not in poll.text
            page = poll.json()
            assert [j["job_id"] for j in page["jobs"]] == ids[100:]
            assert all("command" not in j and "env" not in j for j in page["jobs"])
            rest = api.get(f"/api/jobs?limit=200&before={page['next_before']}",
                           headers=auth(TEAM_A)).json()
            assert [j["job_id"] for j in rest["jobs"]] == ids[:100]
            assert rest["next_before"] is None
            # one job's detail still has its command (never its env)
            one = api.get(f"/api/jobs/{ids[0]}", headers=auth(TEAM_A)).json()
            assert one["command"] == ["/bin/sh", "-c", "x" * 8100] and "env" not in one
            # ?limit= alone keeps its meaning: the newest N, oldest first
            assert [j["job_id"] for j in api.get("/api/jobs?limit=3", headers=auth(ADMIN)
                                                 ).json()["jobs"]] == ids[-3:]
            # a state filter pages over the matching jobs only
            for jid in ids[:5]:
                api.post(f"/api/jobs/{jid}/cancel", headers=auth(TEAM_A))
            got = api.get("/api/jobs?state=cancelled&limit=2", headers=auth(TEAM_A)).json()
            assert [j["job_id"] for j in got["jobs"]] == ids[3:5] and got["next_before"]
            # without ?limit=: one page of limits.list_page_jobs (500) at most
            assert len(api.get("/api/jobs", headers=auth(ADMIN)).json()["jobs"]) == 300
            assert api.get("/api/jobs?before=0", headers=auth(ADMIN)).status_code == 422
    finally:
        svc.stop()


def test_the_client_gathers_every_page(tmp_path: Path) -> None:
    from tessera.live.client import Client

    svc = make_service(tmp_path / "state", start=False)
    try:
        with TestClient(create_app(svc)) as api:
            ids = [_submit(api).json()["job_id"] for _ in range(12)]
            client = Client("http://testserver", TEAM_A)
            api.headers["Authorization"] = f"Bearer {TEAM_A}"
            client._http = api  # the app in-process, through the client's own calls
            assert [j["job_id"] for j in client.jobs()] == ids
            assert [j["job_id"] for j in client.jobs(most=5)] == ids[-5:]
    finally:
        svc.stop()


# -- the spec cache --------------------------------------------------------------------------

def test_the_spec_cache_never_exceeds_its_bounds_and_drops_the_least_recently_used() -> None:
    from tessera.live.spec_cache import ENTRY_OVERHEAD_BYTES, SpecCache

    rng = random.Random(7)
    cache: SpecCache[int] = SpecCache(max_entries=20, max_bytes=40_000)
    for i in range(5000):
        key = f"j-{rng.randrange(100)}"
        if rng.random() < 0.3:
            cache.get(key)
        else:
            cache.put(key, i, rng.randrange(0, 12_000))
        assert len(cache) <= 20 and cache.size_bytes <= 40_000
    small: SpecCache[str] = SpecCache(max_entries=2, max_bytes=10**6)
    small.put("a", "A", 10)
    small.put("b", "B", 10)
    assert small.get("a") == "A"  # a is now the most recent
    small.put("c", "C", 10)
    assert "b" not in small and small.get("a") == "A" and small.get("c") == "C"
    small.put("huge", "H", 10**6)  # larger than the whole bound: not kept
    assert "huge" not in small and small.size_bytes == 2 * (10 + ENTRY_OVERHEAD_BYTES)


def test_a_store_keeps_no_more_specs_than_its_cache_bound(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    svc.stop()
    store = Store(tmp_path / "state" / "state.db", spec_cache_entries=5)
    try:
        from tessera.live.spec import to_live_job
        from tessera.live.store import NewJob

        who = validate_request({**JOB, "env": {"K": "v"}})
        jobs = [NewJob(to_live_job(who, f"j-{i:04d}", "team-a", float(i), False), float(i))
                for i in range(40)]
        store.add_jobs(jobs)
        assert len(store.spec_cache) == 5
        recs = store.jobs()
        assert [r.job_id for r in recs] == [f"j-{i:04d}" for i in range(40)]
        assert len(store.spec_cache) == 5
        assert all(r.job.env == () for r in recs)  # records are lean
        assert store.env("j-0003") == (("K", "v"),)  # a launch reads the env itself
    finally:
        store.close()


def _held_bytes(action: Any) -> tuple[int, Any]:
    """Bytes still allocated (traced) after ``action()``, its result kept alive."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, result
    finally:
        tracemalloc.stop()


def test_cancelling_everything_leaves_no_env_in_memory(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    try:
        who = Principal("a", "team-a")
        req = validate_request({**JOB, "env": BIG_ENV})

        def submit_list_cancel() -> None:
            ids = [svc.submit(req, who).job_id for _ in range(30)]
            svc.store.jobs()  # a listing, as the dashboard's poll makes
            for jid in ids:
                svc.cancel(jid, who)
            svc.store.jobs()

        held, _ = _held_bytes(submit_list_cancel)
        # 30 jobs x 240 KB of env stayed in the cache (~15 MB); now not even one job's env
        assert held < BIG_ENV_BYTES, held
    finally:
        svc.stop()


def test_an_admin_listing_after_a_restart_does_not_read_env(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    with TestClient(create_app(svc)) as api:
        for _ in range(30):
            assert _submit(api, env=BIG_ENV).status_code == 201
    svc.stop()
    again = make_service(tmp_path / "state", start=False)  # a restart: nothing cached
    try:
        with TestClient(create_app(again)) as api:
            held, listed = _held_bytes(
                lambda: api.get("/api/jobs", headers=auth(ADMIN)).json()["jobs"])
            assert len(listed) == 30
            # 30 x 240 KB of env were decoded and kept (~15 MB); now none of it is
            assert held < BIG_ENV_BYTES, held
            assert len(again.store.spec_cache) == 30
            assert again.store.spec_cache.size_bytes < 30 * 4096
    finally:
        again.stop()
