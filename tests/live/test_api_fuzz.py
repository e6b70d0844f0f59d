"""Random and adversarial requests never get a 500, and the service stays healthy.

Hypothesis sends job-shaped bodies with wrong types and hostile values, random JSON, deep
nesting, huge strings, undecodable bytes and bad YAML, to known and random paths with every
method, with no token, a wrong one, a tenant's or the admin's. Every answer must be below 500
and, when it is an error, a JSON object whose ``detail`` is a sentence. Afterwards the health
check answers and a plain submission still works.

Jobs are never run: the service's executor here accepts launches and runs nothing, because
random commands are not something to execute as root.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.live.api import create_app
from tessera.live.executors.base import LaunchSpec, RunStatus
from tessera.live.layout import default_work_dir
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.store import Store
from tessera.live.tenancy import load_tenancy
from tessera.model.cluster import load_cluster
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, auth, wait_for, write_config


class InertExecutor:
    """Accepts every launch and reports the run as running until it is stopped."""

    name = "inert"

    def __init__(self) -> None:
        self.stopped: set[tuple[str, int]] = set()
        self.launched: set[tuple[str, int]] = set()

    def launch(self, spec: LaunchSpec) -> None:
        self.launched.add((spec.job_id, spec.run))

    def status(self, job_id: str, run: int) -> RunStatus:
        if (job_id, run) in self.stopped:
            return RunStatus("exited", exit_code=143, stopped=True)
        return RunStatus("running" if (job_id, run) in self.launched else "absent")

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        self.stopped.add((job_id, run))
        return True

    def release(self, job_id: str, run: int) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    state = tmp_path_factory.mktemp("fuzz") / "state"
    write_config(state)
    svc = LiveService(Store(state / "state.db"), InertExecutor(), load_cluster("v100:4,t4:4", 4),
                      load_tenancy(state), "fifo", default_work_dir(state),
                      ServiceOptions(period_s=0.5, poll_s=0.05))
    svc.start()
    with TestClient(create_app(svc)) as c:
        yield c
    svc.stop()


SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40))
JSONISH = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                       | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)
FIELDS = ["name", "queue", "command", "gpus", "flavors", "priority", "max_retries",
          "checkpoint_dir", "requires_locality", "model", "job_type", "expected_duration_s",
          "total_steps", "env"]
HOSTILE = st.sampled_from([
    "x" * 20_000, "\0", "../../etc/passwd", "/", "/tmp/../..", "team-a", "TESSERA_RUN",
    "A100", "v100", "Z80", 4096, 4097, -1, 0, 2**63, 1e308, "sleep 1", ["sleep", "1"], [],
    {"TESSERA_CHECKPOINT_DIR": "/"}, {"": ""}, {"K": "\0"}, {"K": "v" * 40_000}])
JOBISH = st.dictionaries(st.sampled_from(FIELDS), HOSTILE | JSONISH, max_size=8).map(
    lambda d: {"name": "fz", "command": "true", **d})


def _nested(depth: int, kind: str) -> bytes:
    if kind == "json-list":
        return b"[" * depth + b"]" * depth
    if kind == "json-object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    if kind == "yaml-flow":
        return b"a: " + b"[" * depth + b"]" * depth
    return b"".join(b" " * i + b"- \n" for i in range(min(depth, 1500)))  # 1.1 MB at most


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


BODIES = st.one_of(
    JOBISH.map(_dump), JSONISH.map(_dump), st.binary(max_size=200),
    st.builds(_nested, st.sampled_from([10, 33, 200, 5_000, 100_000]),
              st.sampled_from(["json-list", "json-object", "yaml-flow", "yaml-block"])),
    st.sampled_from([b"", b"{", b"name: [", b"a: &a [1]\nb: *a", b"!!python/object:os.system {}",
                     b"\xff\xfe", b"x" * 1_200_000, b'{"name": "' + b"n" * 1_100_000 + b'"}']),
)
TOKENS = st.sampled_from([None, ADMIN, TEAM_A, TEAM_B, "nope", ADMIN[:-1], "\u00e9" * 10])


def _auth(token: str | None) -> dict[str, bytes]:
    """The header as raw bytes, so a token that is not ASCII reaches the server too."""
    return {} if token is None else {"authorization": f"Bearer {token}".encode()}
PATHS = st.one_of(
    st.sampled_from(["/api/jobs", "/api/jobs/j-0000000000", "/api/jobs/j-0000000000/cancel",
                     "/api/jobs/j-0000000000/explain", "/api/queues", "/api/cluster",
                     "/healthz", "/docs", "/openapi.json", "/api", "/api/jobs/"]),
    st.text(min_size=1, max_size=30).map(lambda t: "/api/jobs/" + quote(t, safe="")),
    st.text(max_size=30).map(lambda t: "/" + quote(t, safe="/")))
QUERIES = st.dictionaries(st.sampled_from(["limit", "state", "x"]),
                          st.integers(-(2**70), 2**70).map(str) | st.text(max_size=20),
                          max_size=3)
METHODS = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
CTYPES = st.sampled_from(["application/json", "application/yaml", "text/plain", "",
                          "application/x-yaml; charset=latin-1"])


def _check(r: Any, what: str) -> None:
    assert r.status_code < 500, (what, r.status_code, r.text[:300])
    if r.status_code >= 400:
        body = r.json()
        assert isinstance(body, dict) and isinstance(body.get("detail"), str), (what, r.text)
        assert body["detail"].strip(), what


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(method=METHODS, path=PATHS, query=QUERIES, token=TOKENS, body=BODIES, ctype=CTYPES)
def test_no_request_gets_a_500(client: TestClient, method: str, path: str,
                               query: dict[str, str], token: str | None, body: bytes,
                               ctype: str) -> None:
    headers = {**_auth(token), **({"content-type": ctype.encode()} if ctype else {})}
    r = client.request(method, path, params=query, content=body, headers=headers)
    if not (r.status_code == 200 and path in ("/", "/dashboard")):
        _check(r, f"{method} {path} {query} {body[:80]!r}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=JOBISH, token=TOKENS, yaml_body=st.booleans())
def test_no_job_request_gets_a_500(client: TestClient, job: dict[str, Any], token: str | None,
                                   yaml_body: bool) -> None:
    headers = _auth(token)
    if yaml_body:
        content = yaml.safe_dump(job, allow_unicode=True).encode()
        headers["content-type"] = b"application/yaml"
    else:
        content, headers["content-type"] = _dump(job), b"application/json"
    r = client.post("/api/jobs", content=content, headers=headers)
    _check(r, f"{job!r:.300}")
    if r.status_code == 201:  # whatever was accepted reads back and lists as JSON
        _check(client.get(f"/api/jobs/{r.json()['job_id']}", headers=auth(ADMIN)), "read back")
        _check(client.get("/api/jobs", headers=auth(ADMIN)), "list")


def test_the_service_is_healthy_after_the_fuzzing(client: TestClient) -> None:
    """Runs after the two properties above (pytest keeps a module's order)."""
    health = client.get("/healthz").json()
    assert health["ok"] is True
    r = client.post("/api/jobs", json={"name": "after", "command": "true"}, headers=auth(TEAM_A))
    assert r.status_code == 201, r.text
    listed = client.get("/api/jobs", headers=auth(TEAM_A)).json()["jobs"]
    assert r.json()["job_id"] in [j["job_id"] for j in listed]
    wait_for(lambda: client.get("/healthz").json()["rounds"] > health["rounds"],
             what="the scheduling loop to decide again")
    for path in ("/api/queues", "/api/cluster", "/api/jobs?limit=5"):
        assert client.get(path, headers=auth(ADMIN)).status_code == 200


def test_a_bug_is_still_answered_as_json(service: LiveService,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(queue: str | None = None) -> dict[str, int]:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service.store, "count_jobs", broken)
    with TestClient(create_app(service), raise_server_exceptions=False) as api:
        r = api.get("/api/cluster", headers=auth(ADMIN))
    assert r.status_code == 500
    assert r.json() == {"detail": "internal error (RuntimeError); the service log has the "
                                  "details"}
