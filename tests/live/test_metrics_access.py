"""Who may read ``/metrics``: the admin token on the API port (a tenant gets 403 and no queue
names), or anyone on the ``--metrics-port`` loopback port, which serves nothing else."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tessera.errors import SpecError
from tessera.live import server
from tessera.live.metrics import ServiceMetrics
from tessera.live.metrics_port import MetricsServer, parse_metrics_address
from tessera.live.server import ServeConfig, reserve_port, serve
from tessera.live.service import LiveService
from tests.cli.runner import run_tessera
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, auth, wait_for
from tests.live.metrics_scrape import Scrape


def test_admin_reads_metrics_tenants_are_refused(api: TestClient) -> None:
    assert api.post("/api/jobs", json={"name": "n", "command": "sleep 0.1"},
                    headers=auth(TEAM_B)).status_code == 201
    r = api.get("/metrics", headers=auth(ADMIN))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    s = Scrape(r.text)
    assert {x["queue"] for x in s.series("tessera_queue_nominal_gpus")} == {"team-a", "team-b"}
    assert s.value("tessera_job_transitions_total", from_state="none", to_state="pending") == 1
    for token in (TEAM_A, TEAM_B):
        r = api.get("/metrics", headers=auth(token))
        assert r.status_code == 403
        assert "team-" not in r.text and "tessera_" not in r.text
    assert api.get("/metrics").status_code == 401
    assert api.get("/metrics", headers=auth("wrong")).status_code == 401


@pytest.mark.parametrize("text", ["0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464",
                                  "example.com:9464", "192.168.0.1:80"])
def test_metrics_port_refuses_addresses_that_are_not_loopback(text: str) -> None:
    with pytest.raises(SpecError, match="not a loopback address"):
        parse_metrics_address(text)


@pytest.mark.parametrize("text", ["http", "0", "70000", "127.0.0.1:", "127.0.0.1:x"])
def test_metrics_port_refuses_bad_ports(text: str) -> None:
    with pytest.raises(SpecError, match="expected PORT or HOST:PORT"):
        parse_metrics_address(text)


def test_metrics_port_takes_loopback_addresses() -> None:
    assert parse_metrics_address("9464") == ("127.0.0.1", 9464)
    assert parse_metrics_address("localhost:9464") == ("127.0.0.1", 9464)
    assert parse_metrics_address("127.0.0.2:9464") == ("127.0.0.2", 9464)
    assert parse_metrics_address("[::1]:9464") == ("::1", 9464)


def test_serve_refuses_a_public_metrics_port(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    code, _out, err = run_tessera(["serve", "--state", f"{tmp_path}/state", "--metrics-port",
                                   "0.0.0.0:9464"], capsys, monkeypatch)
    assert code == 2 and "not a loopback address" in err
    assert not (tmp_path / "state").exists()


def test_metrics_port_serves_only_metrics_without_a_token(service: LiveService) -> None:
    port = _free_port()
    sock = reserve_port("127.0.0.1", port, "--metrics-port")
    side = MetricsServer(ServiceMetrics(service), sock)
    side.start()
    try:
        wait_for(lambda: side.started, 10, "the metrics port")
        url = f"http://127.0.0.1:{port}"
        r = httpx.get(f"{url}/metrics")
        assert r.status_code == 200 and "version=" in r.headers["content-type"]
        assert r.headers["x-content-type-options"] == "nosniff"
        s = Scrape(r.text)
        assert s.value("tessera_queue_nominal_gpus", queue="team-a", flavor="any") == 4
        assert httpx.head(f"{url}/metrics").status_code == 200
        for path in ("/", "/api/jobs", "/api/queues", "/healthz", "/dashboard", "/docs",
                     "/metrics/", "/metrics/x"):
            r = httpx.get(url + path, headers=auth(ADMIN))
            assert r.status_code == 404 and "tessera_" not in r.text, path
        assert httpx.post(f"{url}/metrics").status_code == 405
        assert httpx.post(f"{url}/api/jobs", headers=auth(ADMIN),
                          json={"name": "n", "command": "true"}).status_code == 404
        assert service.store.jobs() == []
    finally:
        side.stop()
        sock.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_stops_on_a_busy_metrics_port_before_writing(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(SpecError) as e:
            serve(ServeConfig(tmp_path / "state", "v100:4", 4), "127.0.0.1", _free_port(),
                  ("127.0.0.1", taken))
    assert str(e.value) == (f"port {taken} is in use (Address already in use); choose "
                            "--metrics-port")
    assert not (tmp_path / "state").exists()


def test_serve_answers_metrics_on_its_metrics_port(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    seen: list[httpx.Response] = []

    def while_serving(_app: object, _sock: object) -> None:  # the API's uvicorn, replaced
        seen.append(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10))

    monkeypatch.setattr(server, "run_http", while_serving)
    serve(ServeConfig(tmp_path / "state", "v100:4", 4), "127.0.0.1", _free_port(),
          ("127.0.0.1", port))
    assert f"metrics:   http://127.0.0.1:{port}/metrics" in capsys.readouterr().out
    assert seen[0].status_code == 200
    assert Scrape(seen[0].text).value("tessera_cluster_gpus", flavor="V100-16GB") == 4
    with pytest.raises(httpx.ConnectError):  # stopped with the service
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
