"""``tessera export kueue`` -> import (``--tenancy``) -> ``export kueue`` is byte-identical, and
the export writes everything the typed tenancy holds (issue 32, part 5): per-flavor quotas,
cohorts with parents, preemption, fungibility, weights, priority classes, local queues, MIG
slices, fair sharing. ClusterQueues, LocalQueues and ResourceFlavors still pass the bundled CRD
schemas and Kueue's webhook rules (:func:`tests.live.test_kueue.violations`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tessera.cli.live import register
from tessera.live.kueue import manifests
from tessera.live.tenancy_file import load_tenancy_file
from tessera.model.cluster import load_cluster
from tests.live.test_kueue import KubeLoader, violations
from tests.live.test_kueue_read import base_docs
from tests.live.test_tenancy_yaml import FULL

runner = CliRunner()

THREE_LEVELS: dict[str, Any] = {
    "queues": [
        {"name": "team-a", "cohort": "small-teams", "weight": 1,
         "flavors": {"A100": {"nominal_gpus": 2, "borrowing_limit_gpus": 6}},
         "preemption": {"reclaim_within_cohort": "LowerPriority"}, "cpus": "1500m"},
        {"name": "team-b", "cohort": "small-teams",
         "flavors": {"A100": {"nominal_gpus": 2, "lending_limit_gpus": 1},
                     "H100": {"nominal_gpus": 0, "borrowing_limit_gpus": 4}},
         "fungibility": {"when_can_borrow": "TryNextFlavor", "when_can_preempt": "MayStopSearch"},
         "min_admitted_s": 1.5, "cpus": 12, "memory": "48Gi"},  # (issue 33: annotations)
        {"name": "big-team", "cohort": "research", "weight": 0,
         "flavors": {"A100": {"nominal_gpus": 8, "mig": {
             "7g.80gb": {"nominal_slices": 1},
             "1g.10gb": {"nominal_slices": 7, "borrowing_limit_slices": 7}}},
                     "H100": {"nominal_gpus": 4}},
         "preemption": {"within_queue": "LowerOrNewerEqualPriority",
                        "reclaim_within_cohort": "Any"}},
    ],
    "cohorts": [
        {"name": "org", "flavors": {"H100": {"nominal_gpus": 4}}},
        {"name": "research", "parent": "org", "weight": 2.5},
        {"name": "small-teams", "parent": "research", "weight": 0.25,
         "flavors": {"A100": {"nominal_gpus": 0, "borrowing_limit_gpus": 4,
                              "lending_limit_gpus": 0}}},
    ],
    "fair_sharing": {"enabled": True},
    "priority_classes": [{"name": "prod", "value": 100}, {"name": "batch", "value": -10}],
    "local_queues": [{"name": "a-ml", "namespace": "team-a", "cluster_queue": "team-a"},
                     {"name": "team-b", "namespace": "team-b", "cluster_queue": "team-b"}],
}

LEGACY: dict[str, Any] = {
    "queues": [{"name": "vision", "nominal_gpus": 8, "borrowing_limit_gpus": 4, "weight": 2},
               {"name": "nlp", "nominal_gpus": 5, "borrowing_limit_gpus": 0,
                "lending_limit_gpus": 3},
               {"name": "any", "nominal_gpus": 3}],
    "cohorts": [{"name": "shared", "nominal_gpus": 4, "borrowing_limit_gpus": 2}],
    "fair_sharing": {"usage_half_life_s": 86400.5},
}


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


def _export(app: typer.Typer, source: Path, cluster: str, out: Path) -> dict[str, bytes]:
    r = runner.invoke(app, ["export", "kueue", "--tenancy", str(source), "--cluster", cluster,
                            "--out", str(out), "--namespace", "ml"])
    assert r.exit_code == 0, r.output
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


CASES = [
    pytest.param(THREE_LEVELS, "a100:8,h100:8", id="3-level cohort tree, MIG, everything"),
    pytest.param(FULL, "a100:8,v100:8", id="the Tessera YAML example"),
    pytest.param(LEGACY, "v100:4,t4:4", id="one-number quotas split across flavors"),
    pytest.param(base_docs(), "a100:8,h100:8", id="Kueue objects in first"),
]


@pytest.mark.parametrize(("tenancy", "cluster"), CASES)
def test_export_import_export_is_byte_identical(app: typer.Typer, tmp_path: Path,
                                                tenancy: Any, cluster: str) -> None:
    src = tmp_path / "tenancy.yaml"
    if isinstance(tenancy, list):
        src.write_text(yaml.safe_dump_all(tenancy, sort_keys=False))
    else:
        src.write_text(yaml.safe_dump(tenancy, sort_keys=False))
    first = _export(app, src, cluster, tmp_path / "one")
    second = _export(app, tmp_path / "one", cluster, tmp_path / "two")
    assert first == second
    assert load_tenancy_file(tmp_path / "one") == load_tenancy_file(tmp_path / "two")
    for name, text in first.items():
        for doc in yaml.load_all(text.decode(), Loader=KubeLoader):
            if doc["kind"] in ("ClusterQueue", "LocalQueue", "ResourceFlavor"):
                assert violations(doc) == [], (name, doc["metadata"])


def test_the_export_holds_every_typed_value(tmp_path: Path) -> None:
    """The typed values of the 3-level tree survive export and import unchanged (the
    one-number form aside, which becomes per-flavor)."""
    src = tmp_path / "t.yaml"
    src.write_text(yaml.safe_dump(THREE_LEVELS, sort_keys=False))
    before = load_tenancy_file(src)
    cluster = load_cluster("a100:8,h100:8", 8)
    out = tmp_path / "out"
    from tessera.live.kueue import write_manifests

    write_manifests(out, manifests(cluster, before))
    after = load_tenancy_file(out)
    assert after.tree.queues == before.tree.queues
    assert after.tree.cohorts == before.tree.cohorts
    assert after.tree.fair_sharing == before.tree.fair_sharing
    assert after.tree.priority_classes == before.tree.priority_classes
    assert after.mig == before.mig
    explicit = {k: v for k, v in after.tree.local_queues.items() if k in ("a-ml", "team-b")}
    assert explicit == dict(before.tree.local_queues)
    assert after.tree.cluster_queue("big-team") == "big-team"  # the LocalQueue added per queue
    assert sorted(p.name for p in out.iterdir()) == [
        "cluster-queues.yaml", "cohorts.yaml", "kueue-configuration.yaml", "local-queues.yaml",
        "priority-classes.yaml", "resource-flavors.yaml"]
