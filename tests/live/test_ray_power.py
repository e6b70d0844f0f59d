"""Power limits and energy of runs on a real local Ray cluster (issue 34, part 5 on Ray): the
rank hosts set the limit on the GPUs Ray gave each rank and restore it, the service stores
the ranks' summed energy, a limit left by a killed rank host is restored by the node's next
host, and a node without NVML runs the job unchanged with an event.

The boards are the file-backed fake NVML (``tests/live/fake_nvml_file.py``), reached in the
Ray worker processes through the rank host's test seam (``TESSERA_TEST_NVML_MODULE``, set in
this process before the embedded head starts, so every Ray process inherits it). One embedded
head serves the whole module (starting Ray costs seconds here).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.executors.ray.rank_power import FAKE_NVML_VAR
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal, load_tenancy
from tessera.model.cluster import load_cluster
from tests.live import fake_nvml_file as fake
from tests.live.helpers import ADMIN, auth, wait_for, write_config

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

STATE_VAR = "TESSERA_TEST_NVML_STATE"
WHO = Principal("admin", None)


@pytest.fixture(scope="module")
def ray_power(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveService, Path]]:
    """A service on an embedded Ray head over one node of 2 V100s, and the fake boards' file."""
    from tessera.live.executors.ray.executor import RayExecutor
    from tessera.live.executors.ray.head import EmbeddedHead
    from tests.live.conftest import RAY_AUTH_VARS, restore_ray_env

    root = tmp_path_factory.mktemp("ray-power")
    boards = root / "nvml.json"
    fake.reset(boards)
    saved = {k: os.environ.get(k) for k in (FAKE_NVML_VAR, STATE_VAR, *RAY_AUTH_VARS)}
    os.environ[FAKE_NVML_VAR] = str(Path(fake.__file__))
    os.environ[STATE_VAR] = str(boards)
    state, work = root / "state", root / "state-work"
    write_config(state)
    cluster = load_cluster("v100:2", 2)
    try:
        svc = LiveService(Store(state / "state.db"),
                          RayExecutor(cluster, None, work / "runs", grace_s=1.0,
                                      state_dir=state),
                          cluster, load_tenancy(state), "fifo", work,
                          ServiceOptions(period_s=0.5, poll_s=0.1, grace_s=1.0))
        svc.start()
        try:
            yield svc, boards
        finally:
            svc.stop()
            EmbeddedHead(state).stop()
    finally:
        restore_ray_env(saved)


def _submit(svc: LiveService, text: str) -> str:
    return svc.submit(parse_request(f"queue: team-a\n{text}"), WHO).job_id


def _job(svc: LiveService, job_id: str) -> dict[str, Any]:
    with TestClient(create_app(svc)) as client:
        got: dict[str, Any] = client.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()
    return got


def _power_events(svc: LiveService, job_id: str) -> list[str]:
    return [e["detail"] for e in _job(svc, job_id)["events"] if e["kind"] == "power"]


def _state(svc: LiveService, job_id: str) -> str:
    rec = svc.store.get(job_id)
    return rec.state.value if rec is not None else "unknown"


def test_each_rank_caps_its_own_gpu_restores_it_and_the_energy_is_summed(
        ray_power: tuple[LiveService, Path]) -> None:
    svc, boards = ray_power
    fake.reset(boards)
    job_id = _submit(svc, "name: capped\ngpus: 2\npower_limit_w: 200\ncommand: sleep 0.5")
    wait_for(lambda: _state(svc, job_id) == "succeeded", 60, "the job to succeed")
    wait_for(lambda: _job(svc, job_id).get("energy") is not None, 30, "the run's energy")
    got = fake.read(boards)
    assert sorted(map(tuple, got["sets"])) == [(0, 200_000), (0, 250_000),
                                               (1, 200_000), (1, 250_000)]
    assert got["limit_mw"] == {"0": 250_000, "1": 250_000}   # restored after
    # Each rank's GPU read twice (start, end), 5 J apart: 2 ranks, 10 J.
    assert _job(svc, job_id)["energy"] == {"total_j": 10.0,
                                           "runs": [{"run": 1, "energy_j": 10.0}]}
    events = _power_events(svc, job_id)
    for rank in (0, 1):
        assert any(e.startswith(f"run 1 rank {rank}: power limit 200 W set on GPU ")
                   for e in events), events
        assert any(e.startswith(f"run 1 rank {rank}: power limit restored: GPU ")
                   for e in events), events
    assert "run 1: energy 10.0 J (2 rank(s))" in events
    # The restore records lived on the node, private, and are gone.
    folder = svc.work_dir / "ray-power"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert [p for p in folder.rglob("*") if p.is_file()] == []


def test_a_limit_left_by_a_killed_rank_host_is_restored_by_the_next_host(
        ray_power: tuple[LiveService, Path]) -> None:
    from tessera.live.executors.ray.hosts import HOST_PREFIX
    from tessera.live.executors.ray.records import NAMESPACE

    svc, boards = ray_power
    fake.reset(boards)
    job_id = _submit(svc, "name: orphan\ngpus: 1\nmax_retries: 0\npower_limit_w: 150\n"
                          "command: sleep 60")
    wait_for(lambda: 150_000 in fake.read(boards)["limit_mw"].values(), 60,
             "the limit to be set")
    gpu = next(g for g, mw in fake.read(boards)["limit_mw"].items() if mw == 150_000)
    hosts = [n for n in ray.util.list_named_actors() if n.startswith(HOST_PREFIX)]
    assert len(hosts) == 1
    ray.kill(ray.get_actor(hosts[0], namespace=NAMESPACE))   # its ranks die with it
    wait_for(lambda: any("left by a rank host that died" in e
                         for e in _power_events(svc, job_id)), 60,
             "the next host to restore the limit")
    assert [int(gpu), 250_000] in fake.read(boards)["sets"]
    events = _power_events(svc, job_id)
    assert f"run 1 rank 0: power limit restored: GPU {gpu} 250 W (left by a rank host that " \
           "died)" in events, events
    rec = svc.store.get(job_id)
    if rec is not None and not rec.final:  # (the lost run failed it: max_retries 0)
        svc.cancel(job_id, WHO)
    assert _state(svc, job_id) in ("failed", "cancelled")
    wait_for(lambda: not svc.store.allocations(), 30, "the GPUs to be released")
    wait_for(lambda: set(fake.read(boards)["limit_mw"].values()) == {250_000}, 30,
             "every limit back")


def test_a_node_without_nvml_runs_the_job_unchanged_and_says_so(
        ray_power: tuple[LiveService, Path]) -> None:
    svc, boards = ray_power
    fake.reset(boards, absent=True)
    job_id = _submit(svc, "name: plain\ngpus: 1\npower_limit_w: 200\ncommand: 'true'")
    wait_for(lambda: _state(svc, job_id) == "succeeded", 60, "the job to succeed")
    wait_for(lambda: any("NVML unavailable" in e for e in _power_events(svc, job_id)), 30,
             "the power event")
    [event] = _power_events(svc, job_id)
    assert event.startswith("run 1 rank 0: power limit not set, energy not measured: NVML "
                            "unavailable on node ")
    assert event.endswith("(NVMLError: Driver Not Loaded); the rank runs unchanged")
    assert _job(svc, job_id).get("energy") is None
    assert fake.read(boards)["sets"] == []
