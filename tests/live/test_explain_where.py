"""``explain`` and where jobs run, as a new user reads them (issue 31, live first-hour items).

* ``explain`` answers with the service's own policy, not a first-come what-if;
* a plain command's speed is said to be unknown, not "1 steps/s";
* where a job ran stays in ``tessera jobs``, ``tessera job`` and the API after it ended;
* a placement says "2 GPUs on node X", never the ambiguous ``X:2``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tessera.cli.live import register
from tessera.live.explain import UNMEASURED, explain
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import ADMIN, TEAM_A, ServerThread, auth, make_service, wait_for

runner = CliRunner()
V100_NODE = "v100-16gb-0000"
_ADMIN = Principal("admin", None)


def _submit(svc: LiveService, **body: object) -> str:
    req = parse_request(yaml.safe_dump({"queue": "team-a", **body}))
    who = svc.tenancy.authenticate(ADMIN)
    assert who is not None
    return svc.submit(req, who).job_id


def _running(svc: LiveService, job_id: str) -> None:
    wait_for(lambda: (r := svc.store.get(job_id)) is not None and r.state.value == "running",
             what=f"{job_id} to run")


@pytest.mark.parametrize(("policy", "starts_now"), [("fifo", False), ("srtf", True)])
def test_explain_answers_with_the_services_policy(tmp_path: Path, policy: str,
                                                  starts_now: bool) -> None:
    """A long job holds the only 2 GPUs; a short one waits. srtf (preemptive, shortest
    remaining first) would start the short one now by preempting the long one; fifo would
    not. Before the fix explain's what-if always ran fifo."""
    svc = make_service(tmp_path / "state", "v100:2", policy=policy, gpus_per_server=2)
    long_job = _submit(svc, name="long", command="sleep 5", gpus=2, expected_duration_s=3000)
    _running(svc, long_job)
    svc.stop()  # the loop stops (the run goes on): the what-if sees this very moment
    short = _submit(svc, name="short", command="sleep 1", gpus=2, expected_duration_s=5)
    rec = svc.store.get(short)
    assert rec is not None
    out = explain(svc, rec, _ADMIN)
    if starts_now:
        assert out["would_fit_now"] == f"2×V100-16GB: 2 GPUs on node {V100_NODE}"
        assert out["would_preempt"] == [long_job]
        assert f"srtf would start it now on 2×V100-16GB: 2 GPUs on node {V100_NODE}, " \
            f"preempting {long_job}" in out["lines"]
    else:
        assert out["would_fit_now"] is None and out["would_preempt"] == []
        assert "fifo would not start it now" in out["lines"]


def test_a_plain_commands_speed_is_not_made_up(service: LiveService) -> None:
    plain = _submit(service, name="plain", command="sleep 5", gpus=1, flavors=["V100"])
    profiled = _submit(service, name="resnet", command="sleep 5", gpus=1, flavors=["V100"],
                       job_type="ResNet-50 (batch size 64)")
    _running(service, plain)
    _running(service, profiled)
    lines = explain(service, service.store.get(plain), _ADMIN)["lines"]  # type: ignore[arg-type]
    assert UNMEASURED in lines and not any("steps/s" in ln for ln in lines)
    lines = explain(service, service.store.get(profiled), _ADMIN)["lines"]  # type: ignore[arg-type]
    assert any(ln.startswith("speed on V100-16GB: ") and "steps/s (profile of" in ln
               for ln in lines), lines


def test_where_a_job_ran_is_kept_after_it_ended(api: TestClient) -> None:
    r = api.post("/api/jobs", json={"name": "quick", "command": "true", "gpus": 2,
                                    "flavors": ["V100"]}, headers=auth(TEAM_A))
    job_id = r.json()["job_id"]
    wait_for(lambda: api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()["state"]
             == "succeeded", what="the job to succeed")
    job = api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()
    assert job["placement"] is None  # holds no GPUs now: the meaning of `placement` is kept
    assert job["last_placement"] == {
        "run": 1, "status": "done", "held": False,
        "text": f"2×V100-16GB: 2 GPUs on node {V100_NODE}",
        "nodes": [{"node_id": V100_NODE, "gpu_count": 2, "flavor": "V100-16GB"}]}
    listed = api.get("/api/jobs", headers=auth(ADMIN)).json()["jobs"]
    assert [j["last_placement"]["text"] for j in listed] == [job["last_placement"]["text"]]
    lines = api.get(f"/api/jobs/{job_id}/explain", headers=auth(ADMIN)).json()["lines"]
    assert lines == ["finished: succeeded", f"run 1 ran on 2×V100-16GB: 2 GPUs on node {V100_NODE}"]


def test_a_running_job_says_its_gpu_count_in_words(api: TestClient) -> None:
    r = api.post("/api/jobs", json={"name": "nap", "command": "sleep 5", "gpus": 2,
                                    "flavors": ["V100"]}, headers=auth(TEAM_A))
    job_id = r.json()["job_id"]
    wait_for(lambda: api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()["state"]
             == "running", what="the job to run")
    job = api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()
    assert job["placement"] == f"2×V100-16GB: 2 GPUs on node {V100_NODE}"
    assert f"{V100_NODE}:2" not in json.dumps(job)  # not in the events' details either
    assert job["last_placement"]["held"] is True


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


def test_the_cli_shows_where_a_finished_job_ran(app: typer.Typer, server: ServerThread,
                                                tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: quick\ncommand: 'true'\ngpus: 2\nflavors: [V100]\n")
    env = {"TESSERA_SERVER": server.url, "TESSERA_TOKEN": TEAM_A}
    job_id = runner.invoke(app, ["submit", str(spec)], env=env).output.split()[1]
    wait_for(lambda: "succeeded" in runner.invoke(app, ["job", job_id], env=env).output,
             what="the job to succeed")
    out = runner.invoke(app, ["job", job_id], env=env).output
    assert f"ran on: 2×V100-16GB: 2 GPUs on node {V100_NODE} (run 1, ended)" in out
    assert f"{V100_NODE}:2" not in out
    out = runner.invoke(app, ["jobs"], env=env).output
    assert f"ran on 2×V100-16GB: 2 GPUs on node {V100_NODE}" in out
