"""The tenancy example (examples/tenancy-philly.yaml) loads against the demo cluster, its quotas
add up to it, and it drives a simulation of the bundled Philly trace: every job lands in a
queue through the example's local queues (the trace's virtual-cluster ids)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tessera.live.tenancy_file import load_tenancy_file
from tessera.model.cluster import load_cluster
from tests.cli.runner import run_tessera

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tenancy-philly.yaml"
CLUSTER = "v100:256,p100:128,k80:64"


def test_the_example_loads_against_the_demo_cluster() -> None:
    flavors = list(load_cluster(CLUSTER, 8).gpus_by_flavor())
    tree = load_tenancy_file(EXAMPLE, flavors).tree
    assert len(tree.queues) == 12 and tree.root("large-vcs") == "philly"
    for flavor in flavors:  # the per-flavor quotas add up to the cluster
        total = sum(q.flavors[flavor].nominal_gpus for q in tree.queues.values())
        assert total == load_cluster(CLUSTER, 8).gpus_by_flavor()[flavor]


def test_simulate_with_the_example(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    code, _out, err = run_tessera(
        ["simulate", "-t", "philly", "-c", CLUSTER, "-p", "fifo", "--limit", "600",
         "--tenancy", str(EXAMPLE), "--out", str(tmp_path / "run")], capsys, monkeypatch)
    assert code == 0, err
    rows = list(csv.DictReader((tmp_path / "run" / "jobs-fifo.csv").open()))
    assert rows and all(r["queue"].startswith("vc-") for r in rows)  # local queues mapped
    assert all(r["outcome"] == "succeeded" for r in rows)
