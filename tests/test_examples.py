"""The files under examples/ stay valid as the formats evolve."""

from __future__ import annotations

from pathlib import Path

from tessera.live.spec import parse_request
from tessera.model.cluster import load_cluster
from tessera.share.spec import load_services

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_cluster_example_loads() -> None:
    c = load_cluster(str(EXAMPLES / "cluster-lab.yaml"))
    assert c.total_gpus == 2 * 8 + 4 * 8 + 4 * 4


def test_job_example_parses() -> None:
    req = parse_request((EXAMPLES / "job-resnet.yaml").read_text())
    assert req.gpus == 2 and req.flavors == ["A100-80GB", "V100-16GB"]  # canonical names


def test_services_example_parses() -> None:
    spec = load_services(EXAMPLES / "services-a100.yaml")
    assert len(spec.services) == 6 and spec.gpu == "A100-80GB"
