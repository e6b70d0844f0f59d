"""Issue 30, item 6 (the API side): bounded integers, whole-name patterns, device variables,
idempotent submissions, and the security headers.

Each test names the finding it covers; the CLI side (terminal-safe text, token files) is in
``tests/live/test_hardening_cli.py``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.errors import SpecError
from tessera.live import client as client_module
from tessera.live.api import create_app
from tessera.live.client import Client, ServiceUnreachable
from tessera.live.executors.base import (
    LaunchSpec,
    LogChunk,
    free_port,
    launch_env,
    rank_envs,
    read_log_file,
)
from tessera.live.layout import default_work_dir
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import validate_request
from tessera.live.store import Store
from tessera.live.tenancy import load_tenancy
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, ServerThread, auth, wait_for, write_config
from tests.live.test_api_fuzz import InertExecutor
from tests.live.test_durability import _start, _wait_up

JOB = {"name": "plain", "command": "true"}
KEY_TTL_S = 24 * 3600.0
DASHBOARD_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                 "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
API_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

# -- 1. every API integer bounded before it reaches SQLite ------------------------------------


def test_a_run_number_past_64_bits_is_a_422_not_a_500(api: TestClient) -> None:
    """Finding: ``?run=9223372036854775808`` answered 500 (OverflowError in SQLite)."""
    job = api.post("/api/jobs", json=JOB, headers=auth(TEAM_A)).json()["job_id"]
    for query in ("run=9223372036854775808", "run=-1", "run=0", "rank=-1", "rank=99999",
                  "offset=-5", f"offset={2**80}", "limit=0", f"limit={2**64}"):
        r = api.get(f"/api/jobs/{job}/logs?{query}", headers=auth(TEAM_A))
        assert r.status_code == 422, (query, r.text)
        name = query.split("=")[0]
        assert name in r.json()["detail"], (query, r.text)
    ok = api.get(f"/api/jobs/{job}/logs?run=1&rank=0&offset=0&limit=10", headers=auth(TEAM_A))
    assert ok.status_code == 200, ok.text


class LoggingExecutor(InertExecutor):
    """The fuzz tests' inert executor, with a real log file for every rank."""

    def __init__(self, log: Path) -> None:
        super().__init__()
        self.log = log

    def read_log(self, job_id: str, run: int, rank: int, offset: int,
                 limit_bytes: int) -> LogChunk | None:
        return read_log_file(str(self.log), offset, limit_bytes)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    """An app whose one job is running (so every log parameter reaches the store and the
    executor), and that job's id."""
    root = tmp_path_factory.mktemp("ints")
    state = root / "state"
    write_config(state)
    (root / "rank.log").write_text("hello\n" * 100)
    svc = LiveService(Store(state / "state.db"), LoggingExecutor(root / "rank.log"),
                      load_cluster("v100:4,t4:4", 4), load_tenancy(state), "fifo",
                      default_work_dir(state), ServiceOptions(period_s=0.5, poll_s=0.05))
    svc.start()
    with TestClient(create_app(svc)) as c:
        job = c.post("/api/jobs", json=JOB, headers=auth(TEAM_A)).json()["job_id"]
        wait_for(lambda: c.get(f"/api/jobs/{job}", headers=auth(TEAM_A)).json()["state"]
                 == "running", what="the job to run")
        yield c, job
    svc.stop()


def _routes(client: TestClient) -> list[APIRoute]:
    app: Any = client.app
    return [r for r in app.routes if isinstance(r, APIRoute)]


ODD_INTEGERS = st.one_of(
    st.integers(-(2**80), 2**80).map(str),
    st.sampled_from(["9223372036854775808", "-9223372036854775809", "18446744073709551616",
                     "1" * 5000, "-0", "+1", "1e3", "0x10", " 1", "1_000", "١", "nan", "",
                     "2.5", "--1"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_parameter_of_any_route_gets_a_5xx(running: tuple[TestClient, str],
                                               data: st.DataObject) -> None:
    """Property: every route of the app (its own route table, so a new route is covered),
    every query parameter huge, negative or odd, a real job's id or another: never a 5xx, and
    an error is a JSON sentence."""
    client, job = running
    route = data.draw(st.sampled_from(_routes(client)))
    method = sorted(route.methods)[0]
    path = route.path
    for p in route.dependant.path_params:
        # the running job only where reading it changes nothing (no cancel)
        pick = st.sampled_from([job, "j-0000000000"]) if method == "GET" else st.just("j-0")
        path = path.replace("{" + p.name + "}", data.draw(pick))
    query = {p.alias: data.draw(ODD_INTEGERS | st.text(max_size=12))
             for p in route.dependant.query_params if data.draw(st.booleans())}
    token = data.draw(st.sampled_from([ADMIN, TEAM_A, TEAM_B]))
    r = client.request(method, path, params=query, headers=auth(token))
    assert r.status_code < 500, (method, path, query, r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert isinstance(r.json().get("detail"), str) and r.json()["detail"].strip()


def test_the_property_reaches_the_log_route_with_its_integers(
        running: tuple[TestClient, str]) -> None:
    """The property above is not vacuous: the log route is in the table with its four
    integers, and a valid read of the running job returns its text."""
    client, job = running
    logs = next(r for r in _routes(client) if r.path.endswith("/logs"))
    assert {p.alias for p in logs.dependant.query_params} == {"rank", "run", "offset", "limit"}
    got = client.get(f"/api/jobs/{job}/logs?limit=6", headers=auth(TEAM_A)).json()
    assert got["text"] == "hello\n" and got["run"] == 1


def _asgi_post(app: Any, headers: list[tuple[bytes, bytes]], body: bytes) -> list[Any]:
    """Send one request straight to the ASGI app (a header a client library would rewrite)."""
    sent: list[Any] = []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "path": "/api/jobs", "raw_path": b"/api/jobs",
             "query_string": b"", "headers": headers, "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80), "scheme": "http", "root_path": ""}
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Any:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def test_a_content_length_of_thousands_of_digits_is_a_413(service: LiveService) -> None:
    """A header integer too: ``int()`` of a 5,000-digit Content-Length raised ValueError."""
    sent = _asgi_post(create_app(service), [(b"authorization", f"Bearer {TEAM_A}".encode()),
                                            (b"content-length", b"9" * 5000)], b"{}")
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 413


# -- 2. names matched whole (fullmatch), not with re.match and $ ------------------------------

@pytest.mark.parametrize("name", ["RANK\n", "FOO\n", "A B", "1X", "X-Y", "X\nY", "\nX", ""])
def test_env_names_are_matched_whole(name: str) -> None:
    """Finding: ``"RANK\\n"`` passed validation (``$`` matches before a final newline)."""
    with pytest.raises(SpecError, match="not a variable name"):
        validate_request({**JOB, "env": {name: "1"}})


def test_no_validation_pattern_in_the_service_uses_match_with_dollar(tmp_path: Path) -> None:
    """Every pattern of the live service and the CLI is used whole: no ``re.match`` against a
    pattern ending in ``$``, and pydantic patterns end in ``$`` only where the Rust engine
    (whose ``$`` is the end of the text) runs them -- both checked on a trailing newline."""
    import tessera

    src = Path(tessera.__file__).parent  # the sources under test
    for path in [*(src / "live").rglob("*.py"), *(src / "cli").glob("*.py")]:
        text = path.read_text()
        for m in re.finditer(r're\.compile\(r?"([^"]*)"', text):
            assert not m.group(1).endswith("$"), (path.name, m.group(1))
    with pytest.raises(SpecError, match="name"):
        validate_request({**JOB, "name": "plain\n"})
    write_config(tmp_path / "state", [{"name": "team\n", "nominal_gpus": 1}])
    with pytest.raises(SpecError, match="name"):
        load_tenancy(tmp_path / "state")


# -- 5. the GPUs a rank may use are the executor's to say -------------------------------------

@pytest.mark.parametrize("name", ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"])
def test_a_job_cannot_name_its_own_devices(name: str, api: TestClient) -> None:
    """Finding: a job's own ``CUDA_VISIBLE_DEVICES`` replaced the one Ray gave it."""
    with pytest.raises(SpecError, match=f"{name} is set by the executor"):
        validate_request({**JOB, "env": {name: "0,1,2,3"}})
    r = api.post("/api/jobs", json={**JOB, "env": {name: "all"}}, headers=auth(TEAM_A))
    assert r.status_code == 422 and name in r.json()["detail"], r.text


def test_the_executors_keep_the_assigned_devices_whatever_the_job_env_says() -> None:
    """A job stored before the rule (its env holds the device variables) still gets only the
    GPUs it was assigned: rank_envs drops them, and launch_env puts the assigned ones last."""
    spec = LaunchSpec("j-old", 1, ("true",), (("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
                                             ("NVIDIA_VISIBLE_DEVICES", "all"), ("KEEP", "1")),
                      Placement.of(resolve_flavor("V100"), (("v100-0000", 2),)), "/tmp/ckpt")
    ranks = rank_envs(spec, "127.0.0.1", 29500)
    assert all("CUDA_VISIBLE_DEVICES" not in e and "NVIDIA_VISIBLE_DEVICES" not in e
               and e["KEEP"] == "1" for e in ranks)
    full, _ = launch_env({**ranks[1], "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, visible_devices="1")
    assert full["CUDA_VISIBLE_DEVICES"] == "1" and "NVIDIA_VISIBLE_DEVICES" not in full


# -- 4. Idempotency-Key on POST /api/jobs ------------------------------------------------------

def _post(api: TestClient, key: str, body: dict[str, Any] = JOB,
          token: str = TEAM_A) -> httpx.Response:
    return api.post("/api/jobs", json=body, headers={**auth(token), "Idempotency-Key": key})


def _count(svc: LiveService) -> int:
    return len(svc.store.jobs())


def test_the_same_key_twice_stores_one_job(api: TestClient, service: LiveService) -> None:
    first = _post(api, "k-1")
    assert first.status_code == 201 and first.json()["replayed"] is False, first.text
    again = _post(api, "k-1")
    assert again.status_code == 200, again.text
    assert again.json()["job_id"] == first.json()["job_id"] and again.json()["replayed"] is True
    assert again.headers["idempotent-replayed"] == "true"
    assert _count(service) == 1


def test_a_key_reused_for_another_request_is_refused(api: TestClient,
                                                     service: LiveService) -> None:
    job = _post(api, "k-2").json()["job_id"]
    r = _post(api, "k-2", {**JOB, "name": "other"})
    assert r.status_code == 422 and "already used for a different request" in r.json()["detail"]
    assert job in r.json()["detail"] and _count(service) == 1


def test_keys_belong_to_their_caller_and_expire(api: TestClient, service: LiveService,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    a = _post(api, "shared").json()["job_id"]
    b = _post(api, "shared", token=TEAM_B).json()["job_id"]
    assert a != b and _count(service) == 2
    later = service.clock() + KEY_TTL_S + 60
    monkeypatch.setattr(service, "clock", lambda: later)
    c = _post(api, "shared")
    assert c.status_code == 201 and c.json()["job_id"] not in (a, b)
    assert _count(service) == 3


@pytest.mark.parametrize("key", ["", "x" * 256, "a b", "caf\u00e9", "tab\there"])
def test_a_malformed_key_is_a_400(api: TestClient, service: LiveService, key: str) -> None:
    r = api.post("/api/jobs", json=JOB,
                 headers={**auth(TEAM_A), "Idempotency-Key": key.encode()})  # type: ignore[dict-item]
    assert r.status_code == 400 and "Idempotency-Key" in r.json()["detail"], r.text
    assert _count(service) == 0


def test_concurrent_posts_with_one_key_store_one_job(server: ServerThread,
                                                     service: LiveService) -> None:
    ids: list[str] = []
    codes: list[int] = []
    go = threading.Barrier(8)

    def post() -> None:
        go.wait()
        r = httpx.post(server.url + "/api/jobs", json=JOB, timeout=10,
                       headers={**auth(TEAM_A), "Idempotency-Key": "burst"})
        codes.append(r.status_code)
        ids.append(r.json()["job_id"])

    threads = [threading.Thread(target=post) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and sorted(codes) == [200] * 7 + [201], (ids, codes)
    assert _count(service) == 1


def test_a_kill_9_between_commit_and_answer_then_a_retry_stores_one_job(tmp_path: Path) -> None:
    """Finding: submissions cut by kill -9 were stored although the client saw an error, so a
    retry submitted twice. The service dies hard right after committing (the ``after-submit``
    crash point, like SIGKILL); the client sees an error; a restart and a retry with the same
    key answer the stored job, and the store holds exactly one."""
    state = tmp_path / "state"
    write_config(state)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(state, port, "after-submit:1")
    try:
        assert _wait_up(url, proc)
        text = "name: once\ncommand: sleep 1\n"
        with pytest.raises(ServiceUnreachable):
            Client(url, TEAM_A).submit_yaml(text, "retry-me")
        assert proc.wait(timeout=10) == 137
        proc = _start(state, port, None)
        assert _wait_up(url, proc)
        again = Client(url, TEAM_A).submit_yaml(text, "retry-me")
        assert again["replayed"] is True and again["name"] == "once"
        jobs = Client(url, ADMIN).jobs()
        assert [j["job_id"] for j in jobs] == [again["job_id"]]
    finally:
        proc.kill()
        proc.wait()


def test_the_client_retries_a_keyed_submission_once_with_the_same_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "SUBMIT_RETRY_PAUSE_S", 0.0, raising=False)
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("idempotency-key"))
        if len(seen) == 1:
            raise httpx.RemoteProtocolError("server disconnected", request=request)
        return httpx.Response(200, json={"job_id": "j-1", "replayed": True})

    c = Client("http://x", "t", transport=httpx.MockTransport(answer))
    assert c.submit_yaml("name: a\ncommand: b\n", "k")["replayed"] is True
    assert seen == ["k", "k"]
    seen.clear()
    with pytest.raises(ServiceUnreachable):  # no key: never retried (it could store twice)
        c.submit_yaml("name: a\ncommand: b\n")
    assert seen == [None]


# -- 7. security headers on the dashboard and the API ------------------------------------------

COMMON = {"x-frame-options": "DENY", "x-content-type-options": "nosniff",
          "referrer-policy": "no-referrer"}


def _has_headers(r: httpx.Response, csp: str) -> None:
    for k, v in COMMON.items():
        assert r.headers.get(k) == v, (r.request.url, k, r.headers)
    assert r.headers.get("content-security-policy") == csp, r.request.url
    assert "frame-ancestors 'none'" in csp


def test_every_answer_has_the_security_headers(api: TestClient) -> None:
    """Finding: the dashboard had no CSP or frame headers."""
    _has_headers(api.get("/dashboard"), DASHBOARD_CSP)
    _has_headers(api.get("/"), DASHBOARD_CSP)
    _has_headers(api.get("/healthz"), API_CSP)
    _has_headers(api.get("/api/jobs", headers=auth(ADMIN)), API_CSP)
    _has_headers(api.get("/api/jobs"), API_CSP)  # a 401
    _has_headers(api.get("/nope"), API_CSP)  # a 404
    _has_headers(api.post("/api/jobs", json=JOB, headers=auth(TEAM_A)), API_CSP)  # short path
    _has_headers(api.post("/api/jobs", content=b"x" * 2_000_000, headers=auth(TEAM_A)),
                 API_CSP)  # refused by the body limit
    js = api.get("/dashboard.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert api.get("/dashboard.css").headers["content-type"].startswith("text/css")


def test_a_500_has_the_security_headers_too(service: LiveService,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Starlette answers a 500 from outside every middleware: the handler adds them."""
    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service.store, "count_jobs", broken)
    with TestClient(create_app(service), raise_server_exceptions=False) as c:
        r = c.get("/api/cluster", headers=auth(ADMIN))
    assert r.status_code == 500, r.text
    _has_headers(r, API_CSP)


def test_the_dashboard_needs_no_inline_script_or_style(api: TestClient) -> None:
    """The CSP allows only the page's own files, so the page has none inline."""
    assert "'unsafe-inline'" not in DASHBOARD_CSP and "script-src 'self'" in DASHBOARD_CSP
    html = api.get("/dashboard").text
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="/dashboard.js" defer>']
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler"
    assert "innerHTML" not in api.get("/dashboard.js").text


def test_the_schema_pages_may_not_be_framed(service: LiveService) -> None:
    with TestClient(create_app(service, api_docs=True)) as c:
        r = c.get("/docs")
    assert r.status_code == 200 and r.headers["x-frame-options"] == "DENY"
    assert r.headers["content-security-policy"] == "frame-ancestors 'none'"


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="needs node to run the dashboard's escaping")
def test_the_dashboard_shows_control_characters_as_escapes() -> None:
    """The dashboard's ``visible()`` (what every table cell goes through) turns control and
    bidi characters into visible escapes; run with node on the shipped script."""
    from importlib import resources

    js = resources.files("tessera.web").joinpath("dashboard.js").read_text()
    unsafe = re.search(r"^const UNSAFE = .*$", js, re.M)
    visible = re.search(r"^function visible\(text\) \{\n.*?\n\}$", js, re.M | re.S)
    assert unsafe and visible
    probe = unsafe.group() + "\n" + visible.group() + (
        '\nprocess.stdout.write(visible("a\\u001b[2J\\u001b]0;t\\u0007\\u202eb\\u009bc\\n\\u2028"));')
    out = subprocess.run([str(NODE), "-e", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "NODE_OPTIONS": ""}).stdout
    assert out == "a\\u001b[2J\\u001b]0;t\\u0007\\u202eb\\u009bc\\u000a\\u2028"
