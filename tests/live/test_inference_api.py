"""Issue 36, part 4: ``/api/services`` and ``tessera service`` (fake MIG GPUs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tessera.cli.service import register
from tessera.live.api import create_app
from tessera.live.inference.devices import FakeDevices
from tessera.live.inference.manager import InferenceManager
from tessera.live.inference.spec import parse_service
from tessera.live.service import LiveService
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, ServerThread, auth, make_service, wait_for

BODY = {"name": "ranker", "model": "resnet50", "slo_ms": 100, "rate_rps": 400,
        "command": ["sleep", "600"]}


@pytest.fixture
def mig_service(tmp_path: Path) -> Iterator[LiveService]:
    svc = make_service(tmp_path / "state", cluster="a100-80gb:2", gpus_per_server=2,
                       start=False)
    svc.inference = InferenceManager(svc, FakeDevices(tmp_path / "gpus.json", "A100-80GB", 2),
                                     check_s=0.05)
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture
def client(mig_service: LiveService) -> Iterator[TestClient]:
    with TestClient(create_app(mig_service)) as c:
        yield c


def test_submit_show_rate_delete(client: TestClient, mig_service: LiveService) -> None:
    r = client.post("/api/services", json=BODY, headers=auth(TEAM_A))
    assert r.status_code == 201, r.text
    assert r.json()["queue"] == "team-a"  # the token's queue
    r = client.post("/api/services", json=BODY, headers=auth(TEAM_A))
    assert r.status_code == 422 and "service 'ranker' exists" in r.json()["detail"]
    wait_for(lambda: client.get("/api/services/ranker", headers=auth(TEAM_A)).json()
             ["replicas"], 20, "a replica")
    shown = client.get("/api/services/ranker", headers=auth(TEAM_A)).json()
    assert shown["slices"] and shown["replicas"][0]["mig_uuid"].startswith("MIG-")
    kinds = [e["kind"] for e in
             client.get("/api/services/ranker", headers=auth(ADMIN)).json()["events"]]
    assert kinds[:3] == ["submitted", "slice-created", "replica-started"], kinds
    r = client.post("/api/services/ranker/rate", json={"rate_rps": 800}, headers=auth(TEAM_A))
    assert r.status_code == 200 and r.json()["rate_rps"] == 800
    r = client.post("/api/services/ranker/rate", json={"rate_rps": -1}, headers=auth(TEAM_A))
    assert r.status_code == 422 and "rate_rps" in r.json()["detail"]
    assert client.delete("/api/services/ranker", headers=auth(TEAM_A)).status_code == 200
    assert client.get("/api/services", headers=auth(ADMIN)).json() == {"services": []}
    m = mig_service.inference
    assert isinstance(m, InferenceManager)
    wait_for(lambda: not m.book.replicas() and not m.held_devices(), 30,
             "its replicas to stop and its slices to go")


def test_a_tenant_cannot_reach_another_tenants_services(client: TestClient) -> None:
    r = client.post("/api/services", json={**BODY, "queue": "team-b"}, headers=auth(TEAM_A))
    assert r.status_code == 403 and "may submit only to queue 'team-a'" in r.json()["detail"]
    r = client.post("/api/services", json={**BODY, "env": {"CUDA_VISIBLE_DEVICES": "MIG-x"}},
                    headers=auth(TEAM_A))
    assert r.status_code == 422 and "env may not set CUDA_VISIBLE_DEVICES" in r.json()["detail"]
    assert client.post("/api/services", json=BODY, headers=auth(TEAM_B)).status_code == 201
    for call in (lambda: client.get("/api/services/ranker", headers=auth(TEAM_A)),
                 lambda: client.post("/api/services/ranker/rate", json={"rate_rps": 1},
                                     headers=auth(TEAM_A)),
                 lambda: client.delete("/api/services/ranker", headers=auth(TEAM_A))):
        r = call()
        assert r.status_code == 404 and r.json()["detail"] == "no service 'ranker'"
    assert client.get("/api/services", headers=auth(TEAM_A)).json() == {"services": []}
    assert client.get("/api/services").status_code == 401


@pytest.mark.parametrize(("body", "code", "said"), [
    ({**BODY, "model": "nope"}, 422, "no profile for model 'nope'"),
    ({**BODY, "slo_ms": 1}, 422, "the SLO must be at least"),
    ({**BODY, "rate_rps": 1e6}, 422, "infeasible: the services need"),
    ({**BODY, "gpu": "x"}, 422, "gpu: Extra inputs are not permitted"),
    ({**BODY, "name": "Bad Name"}, 422, "name: String should match"),
], ids=["model", "slo", "rate", "unknown-key", "name"])
def test_bad_specs_get_one_line(client: TestClient, body: dict[str, object], code: int,
                                said: str) -> None:
    r = client.post("/api/services", json=body, headers=auth(TEAM_A))
    assert r.status_code == code and said in r.json()["detail"], r.text


def test_without_a_device_layer_the_routes_say_how(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    with TestClient(create_app(svc)) as c:
        r = c.get("/api/services", headers=auth(ADMIN))
    assert r.status_code == 409 and "--mig-gpus" in r.json()["detail"]
    svc.executor.close()


def test_cli(mig_service: LiveService, tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    server = ServerThread(mig_service)
    env = {"TESSERA_SERVER": server.url, "TESSERA_TOKEN": TEAM_A}
    try:
        spec = tmp_path / "ranker.yaml"
        spec.write_text("name: ranker\nmodel: resnet50\nslo_ms: 100\nrate_rps: 400\n"
                        "command: [sleep, '600']\n")
        run = CliRunner().invoke
        r = run(app, ["service", "submit", str(spec)], env=env)
        assert r.exit_code == 0 and "submitted service ranker to queue team-a" in r.output
        r = run(app, ["service", "rate", "ranker", "800"], env=env)
        assert r.exit_code == 0 and "expected rate now 800 req/s" in r.output
        r = run(app, ["service", "list"], env=env)
        assert r.exit_code == 0 and "ranker" in r.output and "team-a" in r.output
        r = run(app, ["service", "show", "ranker", "--json"], env=env)
        assert r.exit_code == 0 and json.loads(r.output)["rate_rps"] == 800
        spec.write_text("name: x\nmodel: resnet50\nslo_ms: 100\nrate_rps: 1\ncommand: [a]\n"
                        "env: {CUDA_VISIBLE_DEVICES: MIG-x}\n")
        r = run(app, ["service", "submit", str(spec)], env=env)
        assert r.exit_code == 2 and "env may not set CUDA_VISIBLE_DEVICES" in r.output
        r = run(app, ["service", "delete", "ranker"], env=env)
        assert r.exit_code == 0 and "deleted service ranker" in r.output
    finally:
        server.stop()


def test_serve_mig_gpus_and_a_restart_loses_nothing(tmp_path: Path) -> None:
    """``tessera serve --mig-gpus fake:A100-80GB:2``: services and their plan are in the store
    and the fake GPUs' file, so the next start has them all."""
    from tessera.errors import SpecError
    from tessera.live.inference.setup import FAKE_STATE_NAME
    from tessera.live.server import ServeConfig, build_service
    from tessera.live.tenancy import Principal

    cfg = ServeConfig(tmp_path / "state", "a100-80gb:2", 2, mig_gpus="fake:A100-80GB:2")
    svc, _token = build_service(cfg)
    m = svc.inference
    assert isinstance(m, InferenceManager)
    m_spec = parse_service({**BODY, "queue": "default"}, "default")
    m.submit(m_spec, Principal("admin", None))
    m.tick(1e12)  # plan and create the slices (its replica is launched too)
    plan, held = m.book.state("plan"), m.held_devices()
    assert held == {0} and (tmp_path / "state" / FAKE_STATE_NAME).exists()
    for r in m.book.replicas():
        svc.executor.stop(r.replica_id, r.run, 1.0)
    svc.executor.close()
    svc.store.close()
    again, _ = build_service(ServeConfig(tmp_path / "state", mig_gpus="fake:A100-80GB:2"))
    m2 = again.inference
    assert isinstance(m2, InferenceManager)
    assert m2.book.services() == [m_spec]
    assert m2.book.state("plan") == plan and m2.held_devices() == held
    assert len(m2.book.replicas()) == 1
    again.executor.close()
    again.store.close()
    for bad in ("gpu", "fake:A100-80GB", "fake::2"):
        with pytest.raises(SpecError, match="--mig-gpus takes nvml or fake:MODEL:COUNT"):
            build_service(ServeConfig(tmp_path / "other", "a100-80gb:2", 2, mig_gpus=bad))
