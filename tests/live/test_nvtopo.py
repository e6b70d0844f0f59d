"""Nodes report their NVLink domains from ``nvidia-smi topo -m`` (issue 33, part 6), and Ray
bundles ask for the domain the scheduler chose. The samples under ``data/nvtopo`` are in
nvidia-smi's format (underlined header, NIC rows, legend); no GPU is needed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tessera.live.executors.ray.cluster import gang_bundles, pretend_resources
from tessera.live.nvtopo import describe, parse_topo_matrix, ray_resources
from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor

DATA = Path(__file__).parent / "data" / "nvtopo"


def _sample(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(("sample", "islands"), [
    ("dgx_a100.txt", ((0, 1, 2, 3, 4, 5, 6, 7),)),          # NVSwitch: every pair NV12
    ("dgx1_v100.txt", ((0, 1, 2, 3, 4, 5, 6, 7),)),         # hybrid cube mesh: joined via peers
    ("two_quads.txt", ((0, 1, 2, 3), (4, 5, 6, 7))),         # Volcano #5751: two domains
    ("t4_pcie.txt", ((0,), (1,), (2,), (3,))),               # PCIe only: no NVLink at all
    ("one_gpu.txt", ((0,),)),
])
def test_islands_of_recorded_matrices(sample: str, islands: tuple[tuple[int, ...], ...]) -> None:
    assert parse_topo_matrix(_sample(sample)).islands() == islands


def test_a_node_of_one_island_is_one_domain_named_after_the_host() -> None:
    t = parse_topo_matrix(_sample("dgx_a100.txt"))
    assert t.domains("node-a") == {"node-a": (0, 1, 2, 3, 4, 5, 6, 7)}
    assert ray_resources(t, "node-a") == {"nvlink_domain:node-a": 8.0}
    assert (0, 1, 12) in t.nvlinks


def test_a_node_split_in_two_islands_reports_two_domains() -> None:
    t = parse_topo_matrix(_sample("two_quads.txt"))
    assert ray_resources(t, "node-b") == {"nvlink_domain:node-b/nv0": 4.0,
                                          "nvlink_domain:node-b/nv1": 4.0}
    assert "node-b/nv1 (GPUs 4,5,6,7)" in describe(t, "node-b")


def test_no_nvidia_smi_is_said_in_one_line() -> None:
    assert "no NVLink domains reported" in describe(None, "cpu-box")


@pytest.mark.parametrize(("text", "match"), [
    ("nvidia-smi: command not found\n", "no GPU matrix"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tXX\t X \n", "unknown connection 'XX'"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV4\t X \n", "disagree"),
    ("\tGPU0\tGPU1\nGPU0\tNV1\tNV2\nGPU1\tNV2\t X \n", "not X"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV2\n", "do not match"),
])
def test_bad_matrices_are_one_line_errors(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_topo_matrix(text)


def _domain_cluster() -> ClusterSpec:
    v100 = resolve_flavor("v100")
    nodes = make_nodes(v100, 4, 1)
    return ClusterSpec("c", tuple(replace(n, nvlink_domain=("nvA" if i % 2 == 0 else "nvB"))
                                  for i, n in enumerate(nodes)))


def test_ray_bundles_ask_for_the_gangs_domain() -> None:
    c = _domain_cluster()
    v100 = resolve_flavor("v100")
    domain_of = {n.node_id: n.nvlink_domain or "" for n in c.nodes}
    ids = [n.node_id for n in c.nodes]
    bundles = gang_bundles([(ids[0], 1, v100), (ids[2], 1, v100)], "gpu_flavor", domain_of)
    assert bundles == [{"GPU": 1.0, "gpu_flavor:V100-16GB": 1.0, "nvlink_domain:nvA": 1.0}] * 2
    assert gang_bundles([(ids[0], 1, v100)], "gpu_flavor", {}) == [
        {"GPU": 1.0, "gpu_flavor:V100-16GB": 1.0}]
    assert pretend_resources(c, "gpu_flavor") == {"gpu_flavor:V100-16GB": 4.0,
                                                  "nvlink_domain:nvA": 2.0,
                                                  "nvlink_domain:nvB": 2.0}


def test_the_local_executor_reports_the_hosts_domains_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import subprocess

    import tessera.live.nvtopo as nvtopo
    from tessera.live.executors.local.executor import LocalExecutor

    def fake_run(argv: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        assert argv[1:] == ["topo", "-m"]
        return subprocess.CompletedProcess(argv, 0, _sample("two_quads.txt"), "")

    monkeypatch.setattr(nvtopo.shutil, "which", lambda _name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(nvtopo.subprocess, "run", fake_run)
    monkeypatch.setattr(nvtopo.socket, "gethostname", lambda: "gpu-7")
    with caplog.at_level("INFO", logger="tessera.live"):
        ex = LocalExecutor(tmp_path / "runs")
    assert ex.nvlink is not None and len(ex.nvlink.islands()) == 2
    assert "gpu-7/nv0 (GPUs 0,1,2,3); gpu-7/nv1 (GPUs 4,5,6,7)" in caplog.text
