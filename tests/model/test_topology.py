"""Cluster descriptions carry NVLink domains and switch paths (issue 33, part 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.model.cluster import load_cluster, load_cluster_yaml, parse_compact
from tessera.model.topology import apply_topology, read_topology_table


def test_lingjun_preset_has_the_tables_hosts_and_switches() -> None:
    c = load_cluster("lingjun-847")
    assert len(c.nodes) == 847 and c.total_gpus == 847 * 8
    assert c.has_domains
    assert {n.switch_path[1] for n in c.nodes} == {"P8", "P10", "P12"}
    assert {n.switch_path[2] for n in c.nodes} == {"G6"}
    tors = {n.switch_path[0] for n in c.nodes}
    assert len(tors) == 119  # ToRs keyed by PSW/ASW: the ASW labels recur under PSWs
    assert all(n.rack == n.switch_path[0] for n in c.nodes)


def test_yaml_nodes_carry_domains_and_switch_paths(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "nodes:\n"
        "  - {flavor: H100, count: 8, gpus: 8, nodes_per_nvlink_domain: 4,"
        " switch_path: [tor1, agg1]}\n"
        "  - {flavor: A100-80GB, count: 2, gpus: 8, nvlink_domain: big}\n"
    )
    c = load_cluster_yaml(f)
    doms = [n.nvlink_domain for n in c.nodes]
    assert doms == ["h100-80gb-nvl0"] * 4 + ["h100-80gb-nvl1"] * 4 + ["big", "big"]
    assert c.nodes[0].switch_path == ("tor1", "agg1")
    assert c.max_gpus_per_domain() == 32 and c.max_gpus_local() == 32


def test_cluster_without_domains_keeps_the_node_as_its_largest_local_unit() -> None:
    c = parse_compact("v100:16", gpus_per_server=8)
    assert not c.has_domains and c.max_gpus_local() == 8


def test_yaml_topology_table_is_applied_by_node_id(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("host,nvlink_domain,ASW,PSW,DSW\n"
                                    "v100-16gb-0000,d0,S1,P1,G1\nv100-16gb-0001,d0,S1,P1,G1\n")
    f = tmp_path / "c.yaml"
    f.write_text("topology: t.csv\nnodes:\n  - {flavor: V100, count: 3, gpus: 8}\n")
    c = load_cluster_yaml(f)
    assert [n.nvlink_domain for n in c.nodes] == ["d0", "d0", None]
    assert c.nodes[0].switch_path == ("P1/S1", "P1", "G1") and c.nodes[2].switch_path == ()


def test_topology_table_naming_unknown_hosts_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("host,ASW\nv100-16gb-0000,S1\nv100-0099,S1\nghost,S2\n")
    f = tmp_path / "c.yaml"
    f.write_text("topology: t.csv\nnodes:\n  - {flavor: V100, count: 2, gpus: 8}\n")
    with pytest.raises(SpecError, match=r"names 2 host\(s\) not in the cluster: 'v100-0099', "
                                        r"'ghost'"):
        load_cluster_yaml(f)


@pytest.mark.parametrize(("text", "match"), [
    ("name,ASW\nh,S1\n", "no host column"),
    ("host,rack\nh,r1\n", "no nvlink_domain"),
    ("host,ASW\nh,S1\nh,S2\n", "listed twice"),
    ("host,ASW\n,S1\n", "empty host"),
])
def test_bad_topology_tables(text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        read_topology_table(text)


def test_yaml_rejects_domain_and_domain_size_together(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n  - {flavor: V100, count: 2, gpus: 8, nvlink_domain: a,"
                 " nodes_per_nvlink_domain: 2}\n")
    with pytest.raises(SpecError, match="not both"):
        load_cluster_yaml(f)


def test_apply_topology_leaves_unlisted_nodes_alone() -> None:
    c = parse_compact("v100:16", gpus_per_server=8)
    nodes = apply_topology(c.nodes, {"v100-16gb-0001": ("nv", ("t",))})
    assert nodes[0] == c.nodes[0] and nodes[1].nvlink_domain == "nv"
