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
    restore_ray_env(saved)


def restore_ray_env(saved: dict[str, str | None]) -> None:
    """Put back the variables ``saved`` holds (``None``: unset) and have Ray reread them."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    from tessera.live.executors.ray.cluster import _reread_ray_config

    _reread_ray_config()


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Kill the local runners a test left running under its own ``tmp_path``.

    A service that stops leaves its runs running on purpose (a restarted service adopts them),
    so a test that stops a service with a job still running would leave the run's process tree
    behind for the rest of the session. Killing the runner is enough: its guardians die with
    it and take the run's whole tree (``executors/guardian.py``)."""
    tmp = request.getfixturevalue("tmp_path")
    yield
    import contextlib
    import signal

    mark = str(tmp)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"runner.py") for a in argv) and any(
                a.decode(errors="replace").startswith(mark) for a in argv):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


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
