from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.service import LiveService
from tests.live.helpers import ServerThread, make_service

RAY_AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")


@pytest.fixture(autouse=True)
def _ray_auth_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """A Ray test that connected with token auth (the service turns it on for its process)
    leaves the next one the environment it found, and Ray's cached view of it reread (a
    monkeypatched variable is restored, but Ray's config cache is not), so a later local
    ``ray.init`` is not asked for a token."""
    if request.node.get_closest_marker("ray") is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in RAY_AUTH_VARS}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    from tessera.live.executors.ray_cluster import _reread_ray_config

    _reread_ray_config()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LiveService]:
    svc = make_service(tmp_path / "state")
    yield svc
    svc.stop()


@pytest.fixture
def api(service: LiveService) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as client:
        yield client


@pytest.fixture
def server(service: LiveService) -> Iterator[ServerThread]:
    """The service's API on uvicorn, on a free loopback port."""
    s = ServerThread(service)
    yield s
    s.stop()
