"""Live power wired into the service (issue 34, part 5): a job's ``power_limit_w`` set at launch
on the GPUs its run holds alone and restored after, limits left by a crash restored at start,
each run's energy stored and shown in ``tessera job`` and ``/metrics`` -- through real local
service runs, over a fake NVML module (``tests/live/test_nvml_power.py``'s ``FakeNvml``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.cli.job_text import job_lines
from tessera.live.api import create_app
from tessera.live.layout import default_work_dir
from tessera.live.nvml_power import GpuPower
from tessera.live.run_power import RunPower
from tessera.live.service import LiveService
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, auth, make_service, wait_for, wait_for_job
from tests.live.metrics_scrape import Scrape
from tests.live.test_nvml_power import FakeNvml


class Nvml(FakeNvml):
    """The fake boards (100-300 W, limit 250 W), counted, and what the limit was at each set."""

    def nvmlDeviceGetCount(self) -> int:
        return len(self.limit_mw)


def _service(tmp_path: Path, nv: object, cluster: str = "v100:2") -> LiveService:
    """A local service over a 2-GPU cluster whose power goes through ``nv`` (not started)."""
    state = tmp_path / "state"
    svc = make_service(state, cluster=cluster, gpus_per_server=2, start=False)
    svc.power = RunPower(default_work_dir(state) / "power", "local", svc.cluster, nvml=nv)
    return svc


@pytest.fixture(autouse=True)
def _all_gpus_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def nv() -> Nvml:
    return Nvml(n=2)


@pytest.fixture
def api(tmp_path: Path, nv: Nvml) -> Iterator[TestClient]:
    svc = _service(tmp_path, nv)
    svc.start()
    with TestClient(create_app(svc)) as client:
        client.svc = svc  # type: ignore[attr-defined]
        yield client
    svc.stop()


def _submit(api: TestClient, token: str = TEAM_A, **fields: object) -> str:
    r = api.post("/api/jobs", json={"name": "p", "command": "sleep 0.2", **fields},
                 headers=auth(token))
    assert r.status_code == 201, r.text
    return str(r.json()["job_id"])


def _power_events(api: TestClient, job_id: str) -> list[str]:
    job = api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()
    return [e["detail"] for e in job["events"] if e["kind"] == "power"]


def test_limit_set_on_the_runs_gpus_restored_after_and_energy_shown(
        api: TestClient, nv: Nvml) -> None:
    job_id = _submit(api, gpus=2, power_limit_w=200)
    wait_for_job(api.svc, job_id)  # type: ignore[attr-defined]
    assert nv.sets[:2] == [(0, 200_000), (1, 200_000)]  # set at launch, on both GPUs
    assert nv.limit_mw == {0: 250_000, 1: 250_000}      # and put back after
    events = _power_events(api, job_id)
    assert "run 1: power limit 200 W set on GPU 0,1" in events
    assert "run 1: power limit restored: GPU 0 250 W, GPU 1 250 W" in events
    job = api.get(f"/api/jobs/{job_id}", headers=auth(TEAM_A)).json()
    # Two reads per GPU of a counter that grows 5 J a read: 5 J per GPU.
    assert job["energy"] == {"total_j": 10.0, "runs": [{"run": 1, "energy_j": 10.0}]}
    shown = "\n".join(job_lines(job, time.time()))
    assert "energy: 0.01 kJ over 1 measured run(s): run 1 0.01 kJ" in shown
    scrape = Scrape(api.get("/metrics", headers=auth(ADMIN)).text)
    assert scrape.value("tessera_job_energy_joules_total", job_id=job_id, queue="team-a") == 10
    assert api.get("/metrics", headers=auth(TEAM_A)).status_code == 403  # admin only


def test_out_of_range_or_bad_limits_are_refused_at_submission(api: TestClient) -> None:
    for value, words in ((1000, "power_limit_w 1000 is outside GPU 0's range 100-300 W"),
                         (50, "power_limit_w 50 is outside GPU 0's range 100-300 W"),
                         (-5, "power_limit_w"), ("nan", "power_limit_w")):
        r = api.post("/api/jobs", json={"name": "p", "command": "true", "gpus": 2,
                                        "power_limit_w": value}, headers=auth(TEAM_A))
        assert r.status_code == 422, (value, r.text)
        assert words in r.json()["detail"], r.text


def test_a_limit_left_by_a_crash_is_restored_at_start(tmp_path: Path, nv: Nvml) -> None:
    state = tmp_path / "state"
    crashed = GpuPower(default_work_dir(state) / "power", nv)
    crashed.begin("j-crashed", 3, [0, 1], 150.0)  # ... and the service died before end()
    assert nv.limit_mw == {0: 150_000, 1: 150_000}
    svc = _service(tmp_path, nv)
    try:
        svc.start()
        assert nv.limit_mw == {0: 250_000, 1: 250_000}  # before the loop ran anything
        assert not list((default_work_dir(state) / "power").glob("*.json"))
        notes = [e.detail for e in svc.store.events() if e.kind == "power"]
        assert notes == ["j-crashed.3: power limit restored: GPU 0 250 W, GPU 1 250 W "
                         "(left by an earlier service)"]
    finally:
        svc.stop()


def test_a_run_sharing_the_machine_cannot_set_a_limit(api: TestClient, nv: Nvml) -> None:
    victim = _submit(api, token=TEAM_A, command="sleep 5", gpus=1)
    wait_for_job(api.svc, victim, "running")  # type: ignore[attr-defined]
    hostile = _submit(api, token=TEAM_B, gpus=1, power_limit_w=100)
    wait_for_job(api.svc, hostile)  # type: ignore[attr-defined]
    assert nv.sets == []  # the victim's boards were never capped
    assert _power_events(api, hostile) == [
        "run 1: power limit 100 W not set: under the local executor every run sees all of "
        "this machine's GPUs, and this run holds 1 of the cluster's 2, so a limit would cap "
        "other runs' boards; the run runs unchanged"]
    assert api.get(f"/api/jobs/{hostile}", headers=auth(TEAM_B)).json()["energy"] is None
    api.post(f"/api/jobs/{victim}/cancel", headers=auth(TEAM_A))


@pytest.mark.parametrize("end", ["fails", "cancelled"])
def test_a_limit_never_outlives_its_run(api: TestClient, nv: Nvml, end: str) -> None:
    command = "exit 3" if end == "fails" else "sleep 30"
    job_id = _submit(api, token=TEAM_B, command=command, gpus=2, power_limit_w=120)
    svc = api.svc  # type: ignore[attr-defined]
    if end == "cancelled":
        wait_for(lambda: nv.limit_mw[0] == 120_000, what="the limit set")
        assert api.post(f"/api/jobs/{job_id}/cancel", headers=auth(TEAM_B)).status_code == 200
    wait_for(lambda: svc.store.allocation(job_id, 1) is not None
             and svc.store.allocation(job_id, 1).status == "done", what="the run's end")
    wait_for(lambda: any("restored" in d for d in _power_events(api, job_id)),
             what="the restore event")
    assert nv.limit_mw == {0: 250_000, 1: 250_000}
    assert not list((svc.work_dir / "power").glob("*.json"))


def test_without_nvml_the_job_runs_unchanged_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tessera.live.nvml_power as mod

    monkeypatch.setattr(mod, "load_nvml", lambda: (None, "nvidia-ml-py is not installed"))
    svc = _service(tmp_path, None)
    svc.start()
    try:
        with TestClient(create_app(svc)) as client:
            job_id = _submit(client, gpus=2, power_limit_w=200)
            wait_for_job(svc, job_id)
            assert _power_events(client, job_id) == [
                "run 1: power limit not set, energy not measured: NVML unavailable "
                "(nvidia-ml-py is not installed); the run runs unchanged"]
    finally:
        svc.stop()


def test_an_executor_that_does_not_apply_limits_says_so(tmp_path: Path, nv: Nvml) -> None:
    """An executor other than local and Ray (whose rank hosts apply limits themselves,
    tests/live/test_ray_power.py) runs such a run unchanged, with its event (the executor's name
    is what RunPower goes by; the run itself is local here)."""
    svc = _service(tmp_path, nv)
    svc.power = RunPower(svc.work_dir / "power", "other", svc.cluster, nvml=nv)
    svc.start()
    try:
        with TestClient(create_app(svc)) as client:
            job_id = _submit(client, gpus=2, power_limit_w=200)
            wait_for_job(svc, job_id)
            assert nv.sets == []
            assert _power_events(client, job_id) == [
                "run 1: power limit 200 W not set: the other executor does not apply per-run "
                "power limits yet; the run runs unchanged"]
    finally:
        svc.stop()
