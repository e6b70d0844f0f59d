"""MIG rules held against the reference tables and the documented test vectors."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.share.mig import (
    BASE_KINDS,
    DOUBLE_MEMORY_KINDS,
    MigLayoutError,
    Placement,
    check_layout,
    creation_order,
    enumerate_layouts,
    is_legal,
    mig_gpu,
    parse_layout,
    supported_gpus,
)

GPUS = ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB")


def _reference(shared: Path, variant: str, r510: bool) -> set[str]:
    with (shared / "mig_maximal_layouts.csv").open() as f:
        rows = list(csv.DictReader(f))
    return {
        r["layout"]
        for r in rows
        if r["variant"] == variant and (r510 or r["needs_R510_plus"] == "False")
    }


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize(
    ("variant", "kinds", "r510", "n_max", "n_legal", "n_multisets"),
    [
        ("base", BASE_KINDS, True, 19, 297, 14),
        ("base", BASE_KINDS, False, 18, 296, 13),
        ("with_1g_double_mem", DOUBLE_MEMORY_KINDS, True, 78, 722, 38),
    ],
    ids=["base-r510", "base-pre-r510", "double-mem"],
)
def test_enumeration_matches_reference(
    shared_mig: Path,
    gpu: str,
    variant: str,
    kinds: tuple[str, ...],
    r510: bool,
    n_max: int,
    n_legal: int,
    n_multisets: int,
) -> None:
    g = mig_gpu(gpu)
    maximal = enumerate_layouts(g, kinds, r510=r510)
    assert len(maximal) == n_max
    assert {str(lay) for lay in maximal} == _reference(shared_mig, variant, r510)
    assert len({lay.multiset() for lay in maximal}) == n_multisets
    assert len(enumerate_layouts(g, kinds, maximal_only=False, r510=r510)) == n_legal


def _counts(text: str) -> dict[str, int]:
    return {k: int(n) for k, _, n in (tok.rpartition("x") for tok in text.split())}


def test_multisets_match_reference(shared_mig: Path) -> None:
    with (shared_mig / "mig_maximal_layouts.csv").open() as f:
        expected = {r["layout"]: r["multiset"] for r in csv.DictReader(f)}
    g = mig_gpu("A100-80GB")
    for lay in enumerate_layouts(g, DOUBLE_MEMORY_KINDS):
        assert _counts(lay.multiset()) == _counts(expected[str(lay)])


@pytest.mark.parametrize(
    ("gpu", "kind", "name", "compute", "memory", "starts", "sms"),
    [
        ("A100-40GB", "1g.2m", "1g.10gb", 1, 2, (0, 2, 4, 6), 14),
        ("A100-80GB", "3g", "3g.40gb", 3, 4, (0, 4), 42),
        ("H100-80GB", "3g", "3g.40gb", 3, 4, (0, 4), 60),
        ("H100-80GB", "1g.2m", "1g.20gb", 1, 2, (0, 2, 4, 6), 26),
        ("H200-141GB", "7g", "7g.141gb", 7, 8, (0,), 132),
        ("H200-141GB", "2g", "2g.35gb", 2, 2, (0, 2, 4), 32),
    ],
    ids=["a100-40-1g2m", "a100-80-3g", "h100-3g", "h100-1g2m", "h200-7g", "h200-2g"],
)
def test_profile_table(
    gpu: str, kind: str, name: str, compute: int, memory: int, starts: tuple[int, ...], sms: int
) -> None:
    p = mig_gpu(gpu).profile(kind)
    assert (p.name, p.compute_slices, p.memory_slices, p.starts, p.sm_count) == (
        name, compute, memory, starts, sms,
    )
    assert mig_gpu(gpu).profile(name) == p


def test_supported_gpus_and_aliases() -> None:
    assert set(supported_gpus()) == set(GPUS)
    assert mig_gpu("a100-80gb").gpu == "A100-80GB"


@pytest.mark.parametrize(
    ("text", "r510", "legal"),
    [
        ("3g@4 2g@0 1g@2 1g@3", True, True),
        ("4g@0 3g@4", True, True),
        ("4g@0 3g@4", False, False),
        ("4g@0 2g@4 1g@6", True, True),
        ("2g@0 2g@2 2g@4", True, True),
        ("2g@0 1g@1", True, False),
        ("3g@4 1g@6", True, False),
        ("3g@0 3g@4 1g@6", True, False),
        ("1g+me@0 1g+me@1", True, False),
        ("1g+me@0 1g@1", True, True),
        ("3g@2", True, False),
        ("7g@0 1g@0", True, False),
    ],
    ids=[
        "all-balanced", "4g3g-r510", "4g3g-pre-r510", "guide-example", "three-2g",
        "2g-overlaps-1g", "3g4-overlaps-1g6", "two-3g-plus", "two-media-ext", "one-media-ext",
        "3g-bad-start", "7g-plus-anything",
    ],
)
def test_validity_vectors(text: str, r510: bool, legal: bool) -> None:
    g = mig_gpu("A100-80GB")
    pls = []
    for tok in text.split():
        kind, _, start = tok.partition("@")
        pls.append(Placement(int(start), kind))
    assert is_legal(g, tuple(pls), r510=r510) is legal
    if not legal:
        with pytest.raises(MigLayoutError):
            check_layout(g, pls, r510=r510)


def test_fourth_2g_does_not_fit() -> None:
    g = mig_gpu("H100-80GB")
    lay = parse_layout(g, "2g@0 2g@2 2g@4")
    assert not any(is_legal(g, (*lay.placements, Placement(s, "2g"))) for s in range(8))


@pytest.mark.parametrize(
    ("gpu", "text", "match"),
    [
        ("B200", "7g@0", "unknown GPU"),
        ("V100-16GB", "7g@0", "no MIG support"),
        ("A100-80GB", "5g@0", "unknown MIG profile"),
        ("A100-80GB", "3g", "expected kind@start"),
        ("A100-80GB", "3g@4 1g@6", "overlap"),
    ],
    ids=["unknown-gpu", "not-mig-capable", "unknown-profile", "syntax", "forbidden"],
)
def test_bad_input_errors(gpu: str, text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_layout(mig_gpu(gpu), text)


@pytest.mark.parametrize("gpu", GPUS)
def test_creation_order_prefixes_are_legal(gpu: str) -> None:
    g = mig_gpu(gpu)
    for lay in enumerate_layouts(g, DOUBLE_MEMORY_KINDS):
        steps = creation_order(g, lay)
        assert len(steps) == len(lay.placements)
        sizes = [g.profile(s.profile_name).memory_slices for s in steps]
        assert sizes == sorted(sizes, reverse=True)
        prefix: list[Placement] = []
        for s in steps:
            prefix.append(Placement(s.start, g.profile(s.profile_name).kind))
            assert is_legal(g, tuple(prefix))
