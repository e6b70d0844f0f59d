"""The HTTP API: submit, list, get, cancel, explain; tokens and tenant isolation; bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.service import LiveService
from tests.live.helpers import (
    ADMIN,
    TEAM_A,
    TEAM_B,
    auth,
    make_service,
    wait_for,
    wait_for_job,
)

SLEEP = {"name": "nap", "command": "sleep 0.2", "gpus": 1}


def _state(api: TestClient, job_id: str, token: str = ADMIN) -> str:
    return str(api.get(f"/api/jobs/{job_id}", headers=auth(token)).json()["state"])


def test_submit_runs_to_success_and_lists(api: TestClient) -> None:
    r = api.post("/api/jobs", json=SLEEP, headers=auth(TEAM_A))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["queue"] == "team-a" and job["state"] == "pending"
    wait_for(lambda: _state(api, job["job_id"]) == "succeeded", what="job to succeed")
    got = api.get(f"/api/jobs/{job['job_id']}", headers=auth(TEAM_A)).json()
    assert [e["to"] for e in got["events"] if e["to"]] == [
        "pending", "admitted", "running", "succeeded"]
    listed = api.get("/api/jobs", headers=auth(TEAM_A)).json()["jobs"]
    assert [j["job_id"] for j in listed] == [job["job_id"]]


def test_yaml_body_is_accepted(api: TestClient) -> None:
    r = api.post("/api/jobs", content=b"name: y\ncommand: 'true'\n",
                 headers={**auth(ADMIN), "content-type": "application/yaml"})
    assert r.status_code == 422  # the admin has no queue of its own; 'default' is not configured
    assert "unknown queue 'default'" in r.json()["detail"]
    r = api.post("/api/jobs", content=b"name: y\ncommand: 'true'\n",
                 headers={**auth(TEAM_B), "content-type": "application/yaml"})
    assert r.status_code == 201 and r.json()["queue"] == "team-b"


def test_tokens(api: TestClient) -> None:
    assert api.get("/api/jobs").status_code == 401
    r = api.get("/api/jobs", headers=auth("wrong"))
    assert r.status_code == 401 and r.json()["detail"] == "unknown token"
    assert api.get("/healthz").status_code == 200


def test_tenant_sees_only_its_jobs(api: TestClient) -> None:
    mine = api.post("/api/jobs", json={**SLEEP, "command": "sleep 5"},
                    headers=auth(TEAM_A)).json()["job_id"]
    for method, path in [("GET", f"/api/jobs/{mine}"), ("POST", f"/api/jobs/{mine}/cancel"),
                         ("GET", f"/api/jobs/{mine}/explain"), ("DELETE", f"/api/jobs/{mine}")]:
        r = api.request(method, path, headers=auth(TEAM_B))
        assert r.status_code == 404, (method, path)  # same answer as a job that does not exist
        assert r.json()["detail"] == f"no job {mine!r}"
    assert api.get("/api/jobs", headers=auth(TEAM_B)).json()["jobs"] == []
    assert len(api.get("/api/jobs", headers=auth(ADMIN)).json()["jobs"]) == 1
    r = api.post("/api/jobs", json={**SLEEP, "queue": "team-a"}, headers=auth(TEAM_B))
    assert r.status_code == 403
    assert api.post(f"/api/jobs/{mine}/cancel", headers=auth(TEAM_A)).status_code == 200


def test_bad_bodies(api: TestClient) -> None:
    h = {**auth(TEAM_A), "content-type": "application/json"}
    r = api.post("/api/jobs", content=b'{"name": ', headers=h)
    assert r.status_code == 400 and "not valid JSON" in r.json()["detail"]
    r = api.post("/api/jobs", content=b"name: [", headers={**h, "content-type": "text/yaml"})
    assert r.status_code == 400 and "not valid YAML" in r.json()["detail"]
    r = api.post("/api/jobs", json={**SLEEP, "gpuz": 2}, headers=h)
    assert r.status_code == 422 and "gpuz: unknown field" in r.json()["detail"]
    r = api.post("/api/jobs", json={**SLEEP, "flavors": ["Z80"]}, headers=h)
    assert r.status_code == 422 and "unknown GPU flavor 'Z80'" in r.json()["detail"]


def test_impossible_requests_are_rejected_with_reason(api: TestClient) -> None:
    h = auth(ADMIN)
    cases = [
        ({"gpus": 5, "requires_locality": True, "queue": "team-a"}, "on one node"),
        ({"gpus": 1, "flavors": ["A100"], "queue": "team-a"}, "the cluster has"),
        ({"gpus": 5, "queue": "team-a"}, "largest allowed flavor pool has 4"),
    ]
    for extra, reason in cases:
        r = api.post("/api/jobs", json={**SLEEP, **extra}, headers=h)
        assert r.status_code == 422 and "rejected" in r.json()["detail"], r.text
        assert reason in r.json()["detail"]
    assert api.get("/api/jobs", headers=h).json()["jobs"] == []


def test_request_above_queue_limit_is_rejected(tmp_path: Path) -> None:
    svc = make_service(tmp_path, queues=[
        {"name": "team-a", "nominal_gpus": 1, "borrowing_limit_gpus": 1},
        {"name": "team-b", "nominal_gpus": 1}])
    try:
        with TestClient(create_app(svc)) as client:
            r = client.post("/api/jobs", json={**SLEEP, "gpus": 3}, headers=auth(TEAM_A))
            assert r.status_code == 422
            assert "queue 'team-a' may hold at most 2 (1 nominal + 1 borrowable)" in r.text
    finally:
        svc.stop()


def test_cancel_pending_and_running(api: TestClient, service: LiveService) -> None:
    h = auth(TEAM_A)
    big = api.post("/api/jobs", json={**SLEEP, "command": "sleep 30", "gpus": 4,
                                      "flavors": ["v100"]},
                   headers=h).json()["job_id"]
    wait_for(lambda: _state(api, big) == "running", what="big job to run")
    small = api.post("/api/jobs", json={**SLEEP, "flavors": ["v100"]},
                     headers=h).json()["job_id"]
    wait_for(lambda: "needs 1 GPUs" in api.get(f"/api/jobs/{small}", headers=h).json()["reason"],
             what="a pending reason")
    ex = api.get(f"/api/jobs/{small}/explain", headers=h).json()
    assert ex["state"] == "pending" and ex["would_fit_now"] is None
    assert ex["would_go_when_empty"].startswith("1×")
    assert api.post(f"/api/jobs/{small}/cancel", headers=h).json()["was"] == "pending"
    assert api.post(f"/api/jobs/{big}/cancel", headers=h).json()["was"] == "running"
    assert api.post(f"/api/jobs/{big}/cancel", headers=h).status_code == 409
    wait_for(lambda: not service.store.allocations(), what="GPUs to be released")


def test_queues_and_cluster(api: TestClient) -> None:
    api.post("/api/jobs", json={**SLEEP, "command": "sleep 3", "gpus": 2}, headers=auth(TEAM_B))
    wait_for(lambda: api.get("/api/cluster", headers=auth(ADMIN)).json()["flavors"][0][
        "used_gpus"] == 2, what="GPUs in use")
    qs = {q["name"]: q for q in api.get("/api/queues", headers=auth(ADMIN)).json()["queues"]}
    assert qs["team-b"]["used_gpus"] == 2 and qs["team-a"]["used_gpus"] == 0
    assert qs["team-a"]["nominal_gpus"] == 4
    mine = api.get("/api/queues", headers=auth(TEAM_B)).json()["queues"]
    assert [(q["name"], q["used_gpus"], q["running"]) for q in mine] == [("team-b", 2, 1)]
    flavors = api.get("/api/cluster", headers=auth(TEAM_B)).json()["flavors"]
    assert flavors[0]["queue_used_gpus"] == 2 and flavors[0]["total_gpus"] == 4


def test_waiting_for_a_job_that_ended_otherwise_fails_at_once_with_its_events(
        api: TestClient, service: LiveService) -> None:
    """The test helper ``wait_for_job`` tells a job that ended in another final state from a
    slow one, and shows the job's last events."""
    jid = api.post("/api/jobs", json={**SLEEP, "command": "sleep 30"},
                   headers=auth(TEAM_A)).json()["job_id"]
    assert api.post(f"/api/jobs/{jid}/cancel", headers=auth(TEAM_A)).status_code == 200
    with pytest.raises(AssertionError, match=r"it ended cancelled; its last events:\n.*pending"):
        wait_for_job(service, jid, "succeeded", timeout_s=60)
