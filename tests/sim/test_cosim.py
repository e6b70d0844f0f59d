"""Co-simulation: services reserved on MIG GPUs, training on the rest of the cluster."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tessera.cli.share import register
from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec, load_cluster, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import Workload
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.share.mig import mig_gpu
from tessera.share.profiles import BatchingRule, Service, load_parvagpu_profiles
from tessera.share.segments import SloUnreachableError
from tessera.sim.cosim import (
    cosim_to_json,
    cosimulate,
    profiled_mig_gpu,
    request_streams,
    reserve_gpus,
    whole_gpu_gpus,
)
from tessera.workload import read_trace

SERVICES = (
    Service("ranker", "resnet50", 900.0, 80.0),
    Service("qa", "bert", 60.0, 2000.0),
    Service("thumbs", "mobilenetv2", 1500.0, 60.0),
)
CLUSTER = "a100-80gb:16,v100:16"


def _mixed_sizes() -> ClusterSpec:
    nodes = (
        make_nodes(resolve_flavor("A100-80GB"), 2, 8, prefix="big")
        + make_nodes(resolve_flavor("A100-80GB"), 3, 4, prefix="mid")
        + make_nodes(resolve_flavor("A100-80GB"), 2, 2, prefix="small")
        + make_nodes(resolve_flavor("V100"), 2, 8)
    )
    return ClusterSpec("mixed-sizes", tuple(nodes))


@pytest.mark.parametrize("need", range(0, 33))
def test_reservation_fits_nodes_and_conserves_gpus(need: int) -> None:
    cluster = _mixed_sizes()  # 32 A100-80GB on nodes of 8, 8, 4, 4, 4, 2, 2
    res = reserve_gpus(cluster, resolve_flavor("A100-80GB"), need)
    assert res.gpus == need
    by_id = {n.node_id: n for n in cluster.nodes}
    for r in res.nodes:
        assert 0 < r.reserved <= by_id[r.node_id].gpus == r.node_gpus
        assert by_id[r.node_id].flavor.short == "A100-80GB"
    assert res.remaining.total_gpus == cluster.total_gpus - need
    assert all(n.gpus > 0 for n in res.remaining.nodes)
    left = {n.node_id: n.gpus for n in res.remaining.nodes}
    for n in cluster.nodes:
        taken = next((r.reserved for r in res.nodes if r.node_id == n.node_id), 0)
        assert left.get(n.node_id, 0) == n.gpus - taken
    # as few nodes as possible: k nodes are needed when the k - 1 largest cannot hold `need`
    sizes = sorted((n.gpus for n in cluster.nodes if n.flavor.short == "A100-80GB"), reverse=True)
    fewest = next(k for k in range(len(sizes) + 1) if sum(sizes[:k]) >= need)
    assert len(res.nodes) == fewest


def test_partial_node_keeps_proportional_host_resources() -> None:
    cluster = load_cluster(CLUSTER, 8)
    res = reserve_gpus(cluster, resolve_flavor("A100-80GB"), 3)
    (r,) = res.nodes
    assert (r.reserved, r.node_gpus, r.whole_node) == (3, 8, False)
    before = next(n for n in cluster.nodes if n.node_id == r.node_id)
    after = next(n for n in res.remaining.nodes if n.node_id == r.node_id)
    assert after.gpus == 5 and after.cpu_cores == before.cpu_cores * 5 // 8
    assert len(res.remaining.nodes) == len(cluster.nodes)


def test_whole_nodes_are_dropped() -> None:
    cluster = load_cluster(CLUSTER, 8)
    res = reserve_gpus(cluster, resolve_flavor("A100-80GB"), 16)
    assert [n.flavor.short for n in res.remaining.nodes] == ["V100-16GB", "V100-16GB"]
    assert res.remaining.total_gpus == 16


def test_reservation_errors() -> None:
    cluster = load_cluster(CLUSTER, 8)
    with pytest.raises(SpecError, match=r"need 17 A100-80GB GPUs but .* has 16"):
        reserve_gpus(cluster, resolve_flavor("A100-80GB"), 17)
    only = load_cluster("a100-80gb:8", 8)
    with pytest.raises(SpecError, match="nothing is left for training"):
        reserve_gpus(only, resolve_flavor("A100-80GB"), 8)


def test_cluster_without_profiled_flavor_is_refused() -> None:
    table = load_parvagpu_profiles()
    with pytest.raises(SpecError, match=r"no A100-80GB nodes .*A100-40GB"):
        profiled_mig_gpu(load_cluster("modern-mixed"), table)
    with pytest.raises(SpecError, match="no MIG GPUs"):
        profiled_mig_gpu(load_cluster("v100:8"), table)
    with pytest.raises(SpecError, match="services ask for H100-80GB"):
        profiled_mig_gpu(load_cluster(CLUSTER, 8), table, resolve_flavor("H100-80GB"))
    assert profiled_mig_gpu(load_cluster(CLUSTER, 8), table,
                            resolve_flavor("a100-80gb")).gpu == "A100-80GB"


def test_request_streams_sources() -> None:
    streams = request_streams(SERVICES, "poisson", 2.0, seed=1)
    assert [s.service for s in streams] == [s.name for s in SERVICES]
    with pytest.raises(SpecError, match="unknown request source"):
        request_streams(SERVICES, "philly", 2.0)
    with pytest.raises(SpecError, match="duration"):
        request_streams(SERVICES, "poisson", 0.0)


def test_whole_gpu_baseline_counts_dedicated_gpus() -> None:
    table = load_parvagpu_profiles()
    n = whole_gpu_gpus(SERVICES, table, mig_gpu("A100-80GB"), BatchingRule())
    assert n >= len(SERVICES)


@pytest.fixture(scope="module")
def small_workload() -> Workload:
    return read_trace("philly", limit=40, throughputs=default_throughputs()).workload


def test_cosimulate_end_to_end(small_workload: Workload) -> None:
    cluster = load_cluster(CLUSTER, 8)
    table = load_parvagpu_profiles()
    r = cosimulate(
        SERVICES, BatchingRule(), table, cluster, small_workload, policy="las",
        serve_seconds=2.0, seed=0,
    )
    assert r.reservation.gpus == r.plan.gpus_used >= 1
    assert r.reservation.remaining.total_gpus == cluster.total_gpus - r.plan.gpus_used
    assert r.training.gpus == cluster.total_gpus - r.plan.gpus_used
    assert r.baseline is not None
    assert r.training.jobs == len(small_workload) == r.baseline.jobs
    assert r.training.succeeded > 0 and math.isfinite(r.training.avg_jct_s)
    assert 0.0 <= r.training.utilization <= 1.0
    assert [o.service for o in r.serving.services] == [s.name for s in SERVICES]
    for o in r.serving.services:
        assert o.requests > 0 and o.p99_ms > 0 and 0.0 <= o.attainment <= 1.0
    assert r.gpus_saved == r.whole_gpu_baseline - r.plan.gpus_used
    # the bundled Gavel table has no A100 data: training never touches the reserved GPUs
    assert r.jct_increase == pytest.approx(0.0)
    assert any("nothing by construction" in n for n in r.notes)
    data = cosim_to_json(r)
    json.dumps(data)
    assert data["reservation"]["remaining_gpus"] == cluster.total_gpus - r.plan.gpus_used
    assert len(data["serving"]["services"]) == len(SERVICES)


def _with_a100_as_v100(table: ThroughputTable) -> ThroughputTable:
    """A synthetic table where A100-80GB runs exactly like V100 (test only)."""
    iso = dict(table.isolated)
    for (flavor, cons), rows in table.isolated.items():
        if flavor == "V100-16GB":
            iso[("A100-80GB", cons)] = rows
    pairs = dict(table.pairs)
    pairs["A100-80GB"] = table.pairs["V100-16GB"]
    return ThroughputTable("test", iso, pairs, reference_flavor=table.reference_flavor)


def test_reservation_cost_is_measured_when_training_can_use_the_flavor(
    small_workload: Workload,
) -> None:
    cluster = load_cluster("a100-80gb:16,v100:8", 8)
    tput = _with_a100_as_v100(default_throughputs())
    heavy = (Service("ranker", "resnet50", 5000.0, 80.0),)
    r = cosimulate(
        heavy, BatchingRule(), load_parvagpu_profiles(), cluster, small_workload,
        serve_seconds=1.0, throughputs=tput,
    )
    assert r.baseline is not None and r.jct_increase is not None
    assert r.training.gpus < r.baseline.gpus
    assert not any("by construction" in n for n in r.notes)


# ---------------------------------------------------------------------------------------------
# CLI


@pytest.fixture
def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """test root"""

    register(root)
    return root


def _services_file(tmp_path: Path, text: str) -> str:
    f = tmp_path / "services.yaml"
    f.write_text(text)
    return str(f)


OK_SERVICES = """\
gpu: A100-80GB
services:
  - {name: ranker, model: resnet50, rate_rps: 900, slo_ms: 80}
  - {name: qa, model: bert, rate_rps: 60, slo_ms: 2000}
"""


def test_cli_cosim_json(app: typer.Typer, tmp_path: Path) -> None:
    args = ["share", "cosim", "--services", _services_file(tmp_path, OK_SERVICES),
            "--trace", "philly", "--limit", "30", "--cluster", CLUSTER,
            "--gpus-per-server", "8", "--traffic-s", "1", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, (res.output, res.exception)
    data = json.loads(res.output)
    assert data["reservation"]["remaining_gpus"] == 32 - data["services"]["gpus_used"]
    assert data["training"]["with_services"]["jobs"] == 30
    assert {s["name"] for s in data["serving"]["services"]} == {"ranker", "qa"}


def test_cli_cosim_text(app: typer.Typer, tmp_path: Path) -> None:
    args = ["share", "cosim", "--services", _services_file(tmp_path, OK_SERVICES),
            "-t", "philly", "--limit", "20", "-c", CLUSTER, "--gpus-per-server", "8",
            "--traffic-s", "1", "--no-compare"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, (res.output, res.exception)
    assert "reserved" in res.output and "p99" in res.output and "avg JCT" in res.output
    assert "full cluster" not in res.output


@pytest.mark.parametrize(
    ("services", "cluster", "error", "match"),
    [
        (  # more A100-80GB GPUs than the cluster has
            "services:\n  - {name: big, model: resnet50, rate_rps: 60000, slo_ms: 80}\n",
            CLUSTER, SpecError, "need .* A100-80GB GPUs but",
        ),
        (  # an SLO no profiled configuration meets
            "services:\n  - {name: fast, model: vgg19, rate_rps: 10, slo_ms: 1}\n",
            CLUSTER, SloUnreachableError, "SLO 1 ms",
        ),
        (  # the cluster's MIG GPUs are A100-40GB: no profiles
            OK_SERVICES, "modern-mixed", SpecError, "no A100-80GB nodes",
        ),
    ],
)
def test_cli_cosim_impossible(
    app: typer.Typer, tmp_path: Path, services: str, cluster: str, error: type, match: str
) -> None:
    args = ["share", "cosim", "--services", _services_file(tmp_path, services),
            "-t", "philly", "--limit", "5", "-c", cluster, "--gpus-per-server", "8"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0
    assert isinstance(res.exception, error)
    assert re.search(match, str(res.exception))
