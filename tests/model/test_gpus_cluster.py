"""GPU catalog, cluster presets, compact and YAML cluster specs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tessera.errors import SpecError, UnknownFlavorError
from tessera.model.cluster import load_cluster, parse_compact
from tessera.model.gpus import CATALOG, resolve_flavor

REQUIRED = ["K80", "P100", "V100-16GB", "V100-32GB", "T4", "A10", "L4", "L40S", "A100-40GB",
            "A100-80GB", "H100-80GB", "H200-141GB", "RTX-2080Ti", "RTX-6000"]


@pytest.mark.parametrize("short", REQUIRED)
def test_catalog_has_required_flavors(short: str) -> None:
    f = resolve_flavor(short)
    assert f.mem_gib > 0 and f.fp32_tflops > 0 and f.mem_bw_gbps > 0 and f.tdp_w > 0


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("v100", "Tesla-V100-SXM2-16GB"), ("A100-80GB", "NVIDIA-A100-SXM4-80GB"),
     ("a100_40gb", "NVIDIA-A100-SXM4-40GB"), ("NVIDIA-H200", "NVIDIA-H200"), ("T4", "Tesla-T4"),
     ("quadro-rtx-6000", "Quadro-RTX-6000")],
    ids=["short", "mixed-case", "underscore", "canonical", "t4", "quadro"],
)
def test_aliases_resolve(alias: str, canonical: str) -> None:
    assert resolve_flavor(alias).name == canonical


def test_unknown_flavor_lists_known() -> None:
    with pytest.raises(UnknownFlavorError, match=r"known flavors: .*V100"):
        resolve_flavor("b200x")


def test_mig_capability_matches_hardware() -> None:
    mig = {f.short for f in CATALOG if f.mig_capable}
    assert mig == {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}


@pytest.mark.parametrize(
    ("preset", "gpus", "by_flavor"),
    [("gavel-108", 108, {"V100-16GB": 36, "P100": 36, "K80": 36}),
     ("philly", 2490, {"K80": 642, "P40": 1848}),
     ("pai-2020", 6742, {"K80": 2240, "P100": 1596, "V100-32GB": 1080, "T4": 994,
                         "V100-16GB": 832}),
     ("modern-mixed", 64, {"A100-40GB": 16, "V100-16GB": 24, "T4": 24}),
     ("sia-64", 64, {"T4": 24, "RTX-2080Ti": 24, "A100-40GB": 16})],
)
def test_presets(preset: str, gpus: int, by_flavor: dict[str, int]) -> None:
    c = load_cluster(preset)
    assert c.total_gpus == gpus
    assert {f.short: n for f, n in c.gpus_by_flavor().items()} == by_flavor


def test_philly_preset_servers() -> None:
    c = load_cluster("philly")
    sizes = sorted(n.gpus for n in c.nodes)
    assert sizes.count(2) == 321 and sizes.count(8) == 231


def test_sia_64_has_sias_heterogeneous_servers() -> None:
    # Sia (SOSP'23) simulated setting: 6 T4 servers x 4, 3 RTX 2080 Ti x 8, 2 A100 x 8.
    c = load_cluster("sia-64")
    shapes = Counter((n.flavor.short, n.gpus) for n in c.nodes)
    assert shapes == {("T4", 4): 6, ("RTX-2080Ti", 8): 3, ("A100-40GB", 8): 2}


def test_compact_form() -> None:
    c = parse_compact("v100:8,k80:4", gpus_per_server=4)
    assert c.total_gpus == 12 and len(c.nodes) == 3
    assert c.max_gpus_per_node() == 4


def test_compact_form_puts_the_rest_on_one_smaller_server() -> None:
    c = parse_compact("v100:12,k80:4", gpus_per_server=8)
    assert sorted((n.flavor.short, n.gpus) for n in c.nodes) == [
        ("K80", 4), ("V100-16GB", 4), ("V100-16GB", 8)]
    assert len({n.node_id for n in c.nodes}) == 3


@pytest.mark.parametrize(
    ("text", "match"),
    [("v100:4,k80", "expected flavor:count"), ("v100:x", "not an integer"), ("v100:0", "positive"),
     ("zz:4", "unknown GPU flavor"), ("nonsense", "not a preset")],
)
def test_bad_cluster_specs(text: str, match: str) -> None:
    with pytest.raises((SpecError, UnknownFlavorError), match=match):
        load_cluster(text, gpus_per_server=4)


def test_yaml_cluster(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(
        "name: lab\nnodes:\n"
        "  - {flavor: A100-80GB, count: 2, gpus: 8, rack: r1}\n"
        "  - {flavor: t4, count: 3, gpus: 4, inter_link: ethernet}\n"
    )
    c = load_cluster(str(p))
    assert c.name == "lab" and c.total_gpus == 28
    assert {n.rack for n in c.nodes if n.flavor.short == "A100-80GB"} == {"r1"}
    assert all(n.inter_link.kind == "ethernet" for n in c.nodes if n.flavor.short == "T4")


@pytest.mark.parametrize(
    ("body", "match"),
    [("nodes:\n  - {flavor: v100, gpus: 4, colour: red}\n", "colour"),
     ("nodes: []\n", "nodes"),
     ("nodes:\n  - {flavor: v100, gpus: -1}\n", "gpus"),
     ("nodes: [unclosed\n", "not valid YAML")],
    ids=["unknown-field", "empty", "negative", "bad-yaml"],
)
def test_yaml_cluster_errors(tmp_path: Path, body: str, match: str) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(body)
    with pytest.raises(SpecError, match=match):
        load_cluster(str(p))


def test_a_flavor_is_one_object_compared_by_identity() -> None:
    """Every name resolves to the catalog's one object; copies and pickles come back as it;
    a second flavor under a catalog name is refused, so identity is name equality."""
    import copy
    import dataclasses
    import pickle

    v100 = resolve_flavor("v100")
    assert v100 is resolve_flavor("Tesla-V100-SXM2-16GB") and v100 == resolve_flavor("V100-16GB")
    assert v100 != resolve_flavor("v100-32gb") and v100 != "V100-16GB"
    assert pickle.loads(pickle.dumps(v100)) is v100
    assert copy.copy(v100) is v100 and copy.deepcopy(v100) is v100
    assert {v100: 1}[resolve_flavor("v100-sxm2-16gb")] == 1
    with pytest.raises(ValueError, match="in the catalog already"):
        dataclasses.replace(v100, tdp_w=250)
    assert repr(v100) == "GpuFlavor('V100-16GB')" and str(v100) == "V100-16GB"
