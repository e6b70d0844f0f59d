"""``--tenancy`` in the service and the simulator, and jobs that name Kueue objects (issue 32,
part 5): a bad tenancy stops ``tessera serve`` (exit 2) before its port opens, so it never
starts half configured; a job's queue may name a LocalQueue; ``priority_class`` names a
WorkloadPriorityClass and sets the job's priority (an unknown one is a 4xx naming it)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tessera.cli.live import register as register_clients
from tessera.cli.live import with_priority_class
from tessera.cli.serve import register
from tessera.live.api import create_app
from tessera.live.executors.local import LocalExecutor
from tessera.live.layout import default_work_dir
from tessera.live.request import parse_request
from tessera.live.service import LiveService, Rejected, ServiceOptions
from tessera.live.store import Store
from tessera.live.tenancy import Principal, load_tenancy
from tessera.model.cluster import load_cluster
from tests.live.helpers import ADMIN, TEAM_A, auth, write_config
from tests.live.test_kueue_read import base_docs

runner = CliRunner()


@pytest.fixture
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    register_clients(a)
    return a


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port this test holds: a serve that got as far as binding would say so."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _bad(docs: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    if change == "cycle":
        docs[2]["spec"]["parentName"] = "team"
    elif change == "unknown-kind":
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
                     "metadata": {"name": "t"}})
    elif change == "unsupported-field":
        docs[5]["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "p"}]}
    elif change == "fractional":
        docs[5]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "1.5"
    return docs


@pytest.mark.parametrize(("change", "said"), [
    ("cycle", "cycle of cohorts"),
    ("unknown-kind", "kind 'Topology' is not supported"),
    ("unsupported-field", "ClusterQueue 'vision': spec.admissionChecksStrategy: not supported"),
    ("fractional", "nominalQuota: must be a whole number of GPUs"),
    ("flavor-missing", "quota for flavor 'NVIDIA-H100-80GB-HBM3', which the cluster does not"),
])
def test_serve_with_a_bad_tenancy_exits_2_before_opening_its_port(
        app: typer.Typer, tmp_path: Path, busy_port: int, change: str, said: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(_bad(base_docs(), change)))
    r = runner.invoke(app, ["serve", "--state", str(tmp_path / "state"), "--port",
                            str(busy_port), "--tenancy", str(bad), "-c", "a100:8"])
    assert r.exit_code == 2, r.output
    assert said in r.output and "in use" not in r.output  # refused before the bind was tried
    assert not (tmp_path / "state").exists()  # and before any state was written


def _service(tmp_path: Path, tenancy: Path) -> LiveService:
    state = tmp_path / "state"
    write_config(state, [{"name": "vision", "nominal_gpus": 0}])
    cfg = yaml.safe_load((state / "tessera-live.yaml").read_text())
    for t in cfg["tokens"]:
        t["queue"] = None if t["queue"] is None else "vision"
    (state / "tessera-live.yaml").write_text(yaml.safe_dump(cfg))
    work = default_work_dir(state)
    return LiveService(Store(state / "state.db"), LocalExecutor(work / "runs"),
                       load_cluster("a100:8,h100:8", 8), load_tenancy(state, tenancy), "fifo",
                       work, ServiceOptions(period_s=0.5, poll_s=0.05))


@pytest.fixture
def kueue_service(tmp_path: Path) -> Iterator[LiveService]:
    tenancy = tmp_path / "kueue.yaml"
    tenancy.write_text(yaml.safe_dump_all(base_docs()))
    svc = _service(tmp_path, tenancy)
    yield svc
    svc.stop()


ADMIN_P = Principal("admin", None)


def test_a_job_may_name_a_local_queue(kueue_service: LiveService) -> None:
    new = kueue_service.admit(parse_request("name: a\ncommand: 'true'\nqueue: vision-team\n"),
                              ADMIN_P)
    assert new.job.spec.queue == "vision"  # charged to the ClusterQueue the LocalQueue names
    tenant = Principal("a", "vision")  # a tenant of the ClusterQueue may use its LocalQueue
    assert kueue_service.admit(parse_request("name: b\ncommand: 'true'\nqueue: vision-team\n"),
                               tenant).job.spec.queue == "vision"


def test_priority_class_sets_the_jobs_priority(kueue_service: LiveService) -> None:
    text = "name: a\ncommand: 'true'\nqueue: vision\npriority_class: high\n"
    assert kueue_service.admit(parse_request(text), ADMIN_P).job.spec.priority == 1000
    plain = "name: a\ncommand: 'true'\nqueue: vision\n"
    assert kueue_service.admit(parse_request(plain), ADMIN_P).job.spec.priority == 0
    with pytest.raises(Rejected, match="unknown priority_class 'urgent'; priority classes: high"):
        kueue_service.admit(parse_request(text.replace("high", "urgent")), ADMIN_P)


def test_an_unknown_priority_class_is_a_4xx_naming_it(kueue_service: LiveService) -> None:
    with TestClient(create_app(kueue_service)) as api:
        body = {"name": "a", "command": "true", "queue": "vision-team",
                "priority_class": "urgent"}
        r = api.post("/api/jobs", json=body, headers=auth(TEAM_A))
        assert 400 <= r.status_code < 500 and "urgent" in r.text, r.text
        r = api.post("/api/jobs", json={**body, "priority_class": "high"}, headers=auth(ADMIN))
        assert r.status_code == 201, r.text
        assert r.json()["queue"] == "vision"


def test_submit_priority_class_flag_sets_the_field() -> None:
    req = parse_request("name: a\ncommand: 'true'\ngpus: 2\nflavors: [a100]\n")
    again = parse_request(with_priority_class(req, "high"))
    assert again.priority_class == "high" and again.gpus == 2
    assert again.flavors == ["A100-80GB"]


def test_serve_builds_its_tenancy_from_the_file(tmp_path: Path) -> None:
    """``build_service`` with ``--tenancy``: the first start writes the file's queues to the
    config, and the service holds the file's tree."""
    from tessera.live.server import ServeConfig, build_service

    tenancy = tmp_path / "kueue.yaml"
    tenancy.write_text(yaml.safe_dump_all(base_docs()))
    svc, token = build_service(ServeConfig(tmp_path / "state", "a100:8,h100:8", 8,
                                           tenancy=tenancy))
    try:
        assert token is not None
        assert list(svc.tenancy.quotas) == ["vision"]
        assert svc.tenancy.quota_tree.cohorts["team"].parent == "research"
    finally:
        svc.stop()
        svc.store.close()


def test_simulate_takes_a_tenancy(tmp_path: Path) -> None:
    """``tessera simulate --tenancy``: the file's queues are the run's quotas; a bad file is
    refused before the simulation, naming the object."""
    from tessera.cli.simulate import _on_cluster_queues, _tenancy
    from tessera.errors import SpecError
    from tessera.model.jobs import JobSpec, Workload

    tenancy = tmp_path / "kueue.yaml"
    tenancy.write_text(yaml.safe_dump_all(base_docs()))
    tree = _tenancy(tenancy, "a100:8,h100:8", 8, "none")
    jobs = (JobSpec(job_id="j1", job_type="x", num_gpus=1, total_steps=10, submit_time_s=0,
                    queue="vision-team"),
            JobSpec(job_id="j2", job_type="x", num_gpus=1, total_steps=10, submit_time_s=1,
                    queue="elsewhere"))
    moved = _on_cluster_queues(Workload("w", jobs), tree)
    assert [j.queue for j in moved.jobs] == ["vision", "elsewhere"]
    from tessera.cli.simulate import _sim_config
    from tessera.sched.core.settings import SchedulerSettings
    from tessera.sim.config import SimConfig

    cfg = SimConfig.model_validate({"tenancy": tree})
    assert cfg.tenancy is tree and not cfg.quotas.enabled
    # the flag's value reaches the field every snapshot reads (Snapshot.tenancy), not a copy
    # of the queues alone (cohorts and fair sharing would be lost)
    assert _sim_config(SchedulerSettings(), {"tenancy": tree}).tenancy is tree
    assert "tenancy" not in cfg.model_dump()
    with pytest.raises(SpecError, match="which the cluster does not have"):
        _tenancy(tenancy, "a100:8", 8, "none")
    with pytest.raises(SpecError, match="not both"):
        _tenancy(tenancy, "a100:8,h100:8", 8, "equal")
