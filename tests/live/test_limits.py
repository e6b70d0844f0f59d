"""The API's ceilings (tessera.live.limits): each one answered 4xx with a message, and each
one configurable in tessera-live.yaml."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tessera.errors import SpecError
from tessera.live.api import create_app
from tessera.live.limits import DEFAULT_LIMITS, ApiLimits, BodyError, BodyLimit, parse_body
from tessera.live.spec import parse_request, validate_request
from tessera.live.tenancy import CONFIG_NAME, load_tenancy
from tests.live.helpers import ADMIN, TEAM_A, auth, make_service

JOB = {"name": "x", "command": "true"}
JSON_H = {**auth(TEAM_A), "content-type": "application/json"}
YAML_H = {**auth(TEAM_A), "content-type": "application/yaml"}


@pytest.mark.parametrize(("text", "fmt"), [
    ("[" * 100_000 + "]" * 100_000, "json"), ("[" * 33 + "]" * 33, "json"),
    ('{"a":' * 40 + "1" + "}" * 40, "json"), ("[" * 10_000 + "]" * 10_000, "yaml"),
    ("a:\n" + "".join(" " * i + "- \n" for i in range(1, 60)), "yaml")],
    ids=["json-100k", "json-33", "json-objects-40", "yaml-10k", "yaml-block-60"])
def test_deep_nesting_is_a_clear_error(text: str, fmt: str) -> None:
    with pytest.raises(BodyError, match="nest"):
        parse_body(text, fmt)


def test_nesting_up_to_the_limit_parses() -> None:
    assert parse_body("[" * 32 + "]" * 32, "json") is not None
    assert parse_body("[" * 32 + "]" * 32, "yaml") is not None


def test_yaml_anchors_and_aliases_are_refused() -> None:
    bomb = "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"
    with pytest.raises(BodyError, match="anchors and aliases are not allowed"):
        parse_body(bomb, "yaml")


def test_tessera_submit_refuses_deep_yaml_before_sending() -> None:
    with pytest.raises(SpecError, match=r"job request is not valid YAML.*nested deeper than 32"):
        parse_request("name: x\ncommand: " + "[" * 10_000 + "]" * 10_000)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("command", ["a"] * 257, "command: 257 argv strings; at most 256"),
    ("command", "x" * 8193, "command: longer than 8192 characters"),
    ("model", "m" * 257, "model: longer than 256 characters"),
    ("job_type", "t" * 257, "job_type: longer than 256 characters"),
    ("checkpoint_dir", "/" + "d" * 4096, "checkpoint_dir: longer than 4096 characters"),
    ("flavors", ["v100"] * 17, "flavors: 17 entries; at most 16"),
    ("env", {f"K{i}": "v" for i in range(129)}, "env: 129 variables; at most 128"),
    ("env", {"K" * 257: "v"}, "env: a variable name longer than 256 characters"),
    ("env", {"K": "v" * 32_769}, "env: a value longer than 32768 characters"),
], ids=["argv-items", "command-chars", "model", "job-type", "checkpoint-dir", "flavors",
        "env-entries", "env-key", "env-value"])
def test_each_field_has_a_ceiling_that_the_config_can_raise(field: str, value: Any,
                                                            message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        validate_request({**JOB, field: value})
    raised = ApiLimits(**dict.fromkeys(
        ("command_items", "command_chars", "model_chars", "job_type_chars",
         "checkpoint_dir_chars", "flavors", "env_entries", "env_key_chars", "env_value_chars"),
        10**6))
    assert validate_request({**JOB, field: value}, raised).name == "x"


@pytest.mark.parametrize(("field", "value"), [
    ("priority", float("inf")), ("priority", float("nan")), ("priority", 1e7),
    ("expected_duration_s", float("inf")), ("total_steps", 1e300),
    ("command", "echo \0"), ("env", {"K": "a\0b"}), ("checkpoint_dir", "relative/dir")])
def test_values_that_would_break_a_run_are_refused(field: str, value: Any) -> None:
    with pytest.raises(SpecError, match=f"invalid job request: {field}"):
        validate_request({**JOB, field: value})


def test_sizes_are_checked_before_any_field_is_validated() -> None:
    with pytest.raises(SpecError) as e:
        validate_request({**JOB, "flavors": ["Z80"] * 17, "gpus": "many"})
    assert str(e.value) == "invalid job request: flavors: 17 entries; at most 16"


def test_a_yaml_body_has_its_own_smaller_ceiling(api: TestClient) -> None:
    text = "name: x\ncommand: 'true'\nmodel: m\n" + "# padding\n" * 7000
    r = api.post("/api/jobs", content=text.encode(), headers=YAML_H)
    assert r.status_code == 413 and "limited to 65536 bytes" in r.json()["detail"]
    assert "send JSON" in r.json()["detail"]
    with pytest.raises(SpecError, match="limited to 65536 bytes"):
        parse_request(text)


def test_a_hostile_request_gets_a_short_answer() -> None:
    raw = {**JOB, **{f"{'k' * 10_000}{i}": 1 for i in range(50)}}
    with pytest.raises(SpecError) as e:
        validate_request(raw)
    assert len(str(e.value)) < 1500 and str(e.value).endswith("and 40 more")


def test_infinity_in_json_is_refused_by_the_api(api: TestClient) -> None:
    r = api.post("/api/jobs", content=b'{"name": "x", "command": "true", "priority": Infinity}',
                 headers=JSON_H)
    assert r.status_code == 422 and "priority" in r.json()["detail"]


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000,
                                  b'{"name": ' * 50 + b"1" + b"}" * 50])
def test_deep_json_is_400_not_500(api: TestClient, body: bytes) -> None:
    r = api.post("/api/jobs", content=body, headers=JSON_H)
    assert r.status_code == 400 and "nests deeper than 32 levels" in r.json()["detail"]


def test_deep_yaml_is_400_not_500(api: TestClient) -> None:
    r = api.post("/api/jobs", content=b"[" * 10_000 + b"]" * 10_000, headers=YAML_H)
    assert r.status_code == 400 and "nested deeper than 32 levels" in r.json()["detail"]


def test_a_big_model_string_is_refused(api: TestClient) -> None:
    r = api.post("/api/jobs", json={**JOB, "model": "m" * 100_000}, headers=JSON_H)
    assert r.status_code == 422 and "model: longer than 256" in r.json()["detail"]
    r = api.post("/api/jobs", json={**JOB, "model": "m" * 2_000_000}, headers=JSON_H)
    assert r.status_code == 413 and "larger than 1048576 bytes" in r.json()["detail"]


@pytest.mark.parametrize("limit", ["0", "-1", "10001", "9223372036854775808", "ten"])
def test_list_limit_out_of_range_is_422_with_a_message(api: TestClient, limit: str) -> None:
    r = api.get(f"/api/jobs?limit={limit}", headers=auth(TEAM_A))
    assert r.status_code == 422 and isinstance(r.json()["detail"], str)
    assert r.json()["detail"].startswith("query.limit: ")


def test_limits_come_from_the_config_file(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    config = tmp_path / "state" / CONFIG_NAME
    config.write_text(config.read_text() + "limits: {body_bytes: 2048, list_limit_max: 2}\n")
    svc.tenancy = load_tenancy(tmp_path / "state")
    try:
        with TestClient(create_app(svc)) as api:
            r = api.post("/api/jobs", json={**JOB, "model": "m" * 2100}, headers=JSON_H)
            assert r.status_code == 413 and "larger than 2048 bytes" in r.json()["detail"]
            ids = [api.post("/api/jobs", json=JOB, headers=JSON_H).json()["job_id"]
                   for _ in range(3)]
            listed = api.get("/api/jobs", headers=auth(ADMIN)).json()["jobs"]
            assert [j["job_id"] for j in listed] == ids[1:]  # the newest two
            assert api.get("/api/jobs?limit=3", headers=auth(ADMIN)).status_code == 422
    finally:
        svc.stop()


def test_an_unknown_limit_is_a_config_error(tmp_path: Path) -> None:
    make_service(tmp_path / "state", start=False).store.close()
    config = tmp_path / "state" / CONFIG_NAME
    config.write_text(config.read_text() + "limits: {body_byte: 2048}\n")
    with pytest.raises(SpecError, match=r"limits\.body_byte: Unexpected keyword argument"):
        load_tenancy(tmp_path / "state")


# -- the body middleware, as raw ASGI ------------------------------------------------------------


async def _app(scope: Any, receive: Any, send: Any) -> None:
    body = (await receive())["body"]
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})


def _call(headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[int, bytes, int]:
    """(status, body, chunks read) for a request through ``BodyLimit(max_bytes=10)``."""
    todo = list(chunks)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        chunk = todo.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(todo)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(BodyLimit(_app, 10)({"type": "http", "headers": headers}, receive, send))
    return sent[0]["status"], sent[1]["body"], len(chunks) - len(todo)


def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    status, body, read = _call([(b"content-length", b"11")], [b"x" * 11])
    assert (status, read) == (413, 0)
    assert json.loads(body) == {"detail": "request body is larger than 10 bytes "
                                          "(limits.body_bytes in tessera-live.yaml)"}


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit() -> None:
    status, _body, read = _call([], [b"x" * 6, b"x" * 6, b"x" * 6])
    assert (status, read) == (413, 2)


def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    assert _call([(b"content-length", b"10")], [b"x" * 4, b"x" * 6]) == (200, b"10", 2)


def test_default_limits_are_the_documented_ones() -> None:
    assert (DEFAULT_LIMITS.body_bytes, DEFAULT_LIMITS.nesting_depth,
            DEFAULT_LIMITS.list_limit_max) == (1_048_576, 32, 10_000)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    for name in ("body_bytes", "yaml_bytes", "nesting_depth", "list_limit_max", "command_items",
                 "command_chars", "model_chars", "job_type_chars", "checkpoint_dir_chars",
                 "flavors", "env_entries", "env_key_chars", "env_value_chars"):
        value = getattr(DEFAULT_LIMITS, name)
        assert f"| `{name}` | {value:,} |" in doc, name
