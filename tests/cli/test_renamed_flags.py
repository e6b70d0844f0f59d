"""Renamed flags keep working under their old spelling, and folder options name a missing folder.

The old spellings are hidden from ``--help`` (docs/cli.md lists them); each still sets the
value and prints a note naming the new flag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.cli import app

runner = CliRunner()
PLAN = ["plan", "--model", "imagenet", "--devices", "A100:2,V100:8", "--global-batch", "512",
        "--json"]


def test_plan_takes_gpus_per_server_and_the_old_gpus_per_node() -> None:
    new = runner.invoke(app, [*PLAN, "--gpus-per-server", "4"])
    old = runner.invoke(app, [*PLAN, "--gpus-per-node", "4"])
    default = runner.invoke(app, PLAN)
    assert new.exit_code == old.exit_code == default.exit_code == 0, old.output
    assert json.loads(new.stdout) == json.loads(old.stdout)
    assert "--gpus-per-node is deprecated; use --gpus-per-server" in old.stderr
    nodes = {d["node"] for d in json.loads(new.stdout)["devices"] if d["flavor"] == "V100-16GB"}
    assert len(nodes) == 2  # 8 V100s in 4-GPU servers
    nodes = {d["node"] for d in json.loads(default.stdout)["devices"]
             if d["flavor"] == "V100-16GB"}
    assert len(nodes) == 1  # the default: one 8-GPU server


@pytest.mark.parametrize(("old", "new", "value"), [
    ("--sim-seconds", "--traffic-s", "1"), ("--time-limit", "--time-limit-s", "5")])
def test_share_plan_old_spellings(tmp_path: Path, old: str, new: str, value: str) -> None:
    # --traffic-s is the replay of the profile-model plan (--proxy); the default p99 check
    # replays --requests-per-service instead
    args = ["share", "plan", "--services", str(_services(tmp_path)), "--json", "--proxy"]
    if old != "--sim-seconds":
        args += ["--traffic-s", "1"]
    r = runner.invoke(app, [*args, old, value])
    assert r.exit_code == 0, r.output
    assert f"{old} is deprecated; use {new}" in r.stderr
    if old == "--sim-seconds":
        assert json.loads(r.stdout)["predicted"]["traffic"] == "poisson 1 s"


def test_old_spellings_are_hidden_from_help() -> None:
    shown = runner.invoke(app, ["share", "plan", "--help"]).stdout
    assert "--traffic-s" in shown and "--time-limit-s" in shown
    assert "--sim-seconds" not in shown and "--time-limit " not in shown
    assert "--gpus-per-node" not in runner.invoke(app, ["plan", "--help"]).stdout


@pytest.mark.parametrize("flag", ["--parvagpu", "--profiles"])
def test_share_plan_names_a_missing_folder(tmp_path: Path, flag: str) -> None:
    missing = tmp_path / "nowhere"
    r = runner.invoke(app, ["share", "plan", "--scenario", "2", flag, str(missing)])
    assert r.exit_code != 0
    assert f"{flag}: no such folder: {missing}" in str(r.exception)


def _services(tmp_path: Path) -> Path:
    f = tmp_path / "services.yaml"
    f.write_text("gpu: A100-80GB\nservices:\n"
                 "  - {name: ranker, model: resnet50, rate_rps: 300, slo_ms: 80}\n")
    return f
