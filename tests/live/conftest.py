from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.service import LiveService
from tests.live.helpers import make_service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LiveService]:
    svc = make_service(tmp_path / "state")
    yield svc
    svc.stop()


@pytest.fixture
def api(service: LiveService) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as client:
        yield client
