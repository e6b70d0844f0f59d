"""The CLI client against a real uvicorn server, and ``export kueue``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tessera.cli.live import register
from tessera.live.service import LiveService
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, ServerThread, wait_for

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


def _cli(app: typer.Typer, server: ServerThread, token: str, *args: str) -> tuple[int, str]:
    r = runner.invoke(app, [*args], env={"TESSERA_SERVER": server.url, "TESSERA_TOKEN": token})
    return r.exit_code, r.output


def test_submit_list_show_explain_cancel(app: typer.Typer, server: ServerThread,
                                         tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: train\ncommand: sleep 30\ngpus: 4\nflavors: [T4]\n")
    code, out = _cli(app, server, TEAM_A, "submit", str(spec), "--json")
    assert code == 0, out
    big = json.loads(out)["job_id"]
    code, out = _cli(app, server, TEAM_A, "submit", str(spec))
    assert code == 0 and out.startswith("submitted j-") and "queue team-a" in out
    waiting = out.split()[1]
    wait_for(lambda: "needs 4 GPUs of T4" in _cli(app, server, TEAM_A, "explain", waiting)[1],
             what="a pending reason")
    code, out = _cli(app, server, TEAM_A, "explain", waiting)
    assert "on an empty cluster it would run on 4×T4" in out
    code, out = _cli(app, server, TEAM_A, "jobs")
    assert code == 0 and big in out and "running" in out and "pending" in out
    code, out = _cli(app, server, TEAM_A, "job", big)
    assert code == 0 and "pending → admitted" in out
    assert _cli(app, server, TEAM_A, "cancel", waiting)[1].startswith(f"cancelled {waiting}")
    assert "was running" in _cli(app, server, TEAM_A, "cancel", big)[1]
    code, out = _cli(app, server, TEAM_A, "queues")
    assert code == 0 and "team-a" in out and "team-b" not in out  # a tenant sees its own
    code, out = _cli(app, server, ADMIN, "queues")
    assert code == 0 and "team-a" in out and "team-b" in out
    code, out = _cli(app, server, TEAM_A, "cluster")
    assert code == 0 and "V100-16GB" in out and "T4" in out and "used by team-a" in out
    code, out = _cli(app, server, ADMIN, "cluster")
    assert code == 0 and "in use" in out


@pytest.mark.parametrize(("token", "args", "message"), [
    (TEAM_B, ["job", "j-nope"], "no job 'j-nope' (HTTP 404)"),
    ("bad", ["jobs"], "unknown token (HTTP 401)"),
    ("", ["queues"], "missing bearer token (HTTP 401)"),
    (ADMIN, ["cancel", "j-nope"], "no job 'j-nope'"),
], ids=["not-found", "wrong-token", "no-token", "cancel-unknown"])
def test_errors_are_one_line(app: typer.Typer, server: ServerThread, token: str,
                             args: list[str], message: str) -> None:
    code, out = _cli(app, server, token, *args)
    assert code == 2 and message in out and "Traceback" not in out


def test_bad_yaml_fails_before_sending(app: typer.Typer, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\ncommand: sleep 1\ngpus: 2\ncolour: blue\n")
    r = runner.invoke(app, ["submit", str(spec)], env={"TESSERA_SERVER": "http://127.0.0.1:9"})
    assert r.exit_code == 2 and "colour: unknown field" in r.output
    r = runner.invoke(app, ["submit", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "cannot read" in r.output
    r = runner.invoke(app, ["jobs"], env={"TESSERA_SERVER": "http://127.0.0.1:9",
                                          "TESSERA_TOKEN": "x"})
    assert r.exit_code == 2 and "cannot reach http://127.0.0.1:9" in r.output


def test_export_kueue(app: typer.Typer, service: LiveService, tmp_path: Path) -> None:
    out = tmp_path / "kueue"
    r = runner.invoke(app, ["export", "kueue", "--state", str(service.store.path.parent),
                            "--cluster", "v100:4,t4:4", "--out", str(out), "--namespace", "ml"])
    assert r.exit_code == 0, r.output
    flavors = list(yaml.safe_load_all((out / "resource-flavors.yaml").read_text()))
    assert [f["metadata"]["name"] for f in flavors] == ["v100-16gb", "t4"]
    assert flavors[0]["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}
    cqs = list(yaml.safe_load_all((out / "cluster-queues.yaml").read_text()))
    assert {c["apiVersion"] for c in cqs} == {"kueue.x-k8s.io/v1beta2"}
    a = next(c for c in cqs if c["metadata"]["name"] == "team-a")["spec"]
    assert a["cohortName"] == "tessera"
    per_flavor = {f["name"]: f["resources"][0] for f in a["resourceGroups"][0]["flavors"]}
    assert per_flavor == {  # 4 nominal + 4 borrowable, split over two equal flavor pools
        "v100-16gb": {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 2},
        "t4": {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 2}}
    lqs = list(yaml.safe_load_all((out / "local-queues.yaml").read_text()))
    assert lqs[0] == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                      "metadata": {"name": "team-b" if lqs[0]["metadata"]["name"] == "team-b"
                                   else "team-a", "namespace": "ml"},
                      "spec": {"clusterQueue": lqs[0]["metadata"]["name"]}}


def test_split_proportionally_adds_up() -> None:
    from tessera.live.kueue import split_proportionally

    assert split_proportionally(10, [4, 4, 2]) == [4, 4, 2]
    assert split_proportionally(5, [3, 3]) in ([3, 2], [2, 3])
    assert sum(split_proportionally(7, [1, 2, 3])) == 7
    assert split_proportionally(3, [0, 0]) == [0, 0]
