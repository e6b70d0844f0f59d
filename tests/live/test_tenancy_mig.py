"""MIG slices as quota resources (issue 32, part 6): ``nvidia.com/mig-<profile>`` quota lines
read from ClusterQueues and Tessera YAML, and charged by what a slice uses -- its compute and
memory slices, as Kueue #10108 proposes -- not by its count."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tessera.errors import SpecError
from tessera.live.tenancy_file import load_tenancy_file
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.mig_quota import (
    MigCharge,
    MigQuota,
    fits_mig_quota,
    mig_budget,
    mig_charge,
    mig_profile_of,
    mig_resource,
)

A100 = resolve_flavor("A100-80GB")
A100_40 = resolve_flavor("A100-40GB")
H100 = resolve_flavor("H100")
T4 = resolve_flavor("T4")


def test_a_slice_is_charged_its_compute_and_memory_slices() -> None:
    """A 7g.80gb uses all 7 compute and 8 memory slices of an A100-80GB; a 1g.10gb one of each:
    8x the memory (the issue's example), where a per-profile count charges both 1."""
    assert mig_charge(A100, "7g.80gb") == MigCharge(7, 8)
    assert mig_charge(A100, "1g.10gb") == MigCharge(1, 1)
    assert mig_charge(A100, "3g.40gb", 2) == MigCharge(6, 8)
    assert mig_charge(H100, "7g.80gb") == MigCharge(7, 8)
    assert mig_charge(A100_40, "1g.5gb") == MigCharge(1, 1)


def test_four_small_slices_do_not_buy_four_big_ones() -> None:
    """Kueue #10108: a team with four 1g.10gb slices must not consume the same quota as a team
    with four 7g.80gb slices."""
    small = {"1g.10gb": MigQuota("1g.10gb", 4)}
    assert fits_mig_quota(A100, small, {}, {"1g.10gb": 4})
    assert not fits_mig_quota(A100, small, {}, {"7g.80gb": 1})
    big = {"7g.80gb": MigQuota("7g.80gb", 1)}
    assert mig_budget(A100, big.values()) == MigCharge(7, 8)
    assert fits_mig_quota(A100, big, {}, {"1g.10gb": 7})  # seven small ones in its place
    assert not fits_mig_quota(A100, big, {"1g.10gb": 7}, {"1g.10gb": 1})  # no compute left
    # 3g.40gb (3 compute, 4 memory) + 4g.40gb (4, 4) = (7, 8): exactly the budget ...
    assert fits_mig_quota(A100, big, {"3g.40gb": 1}, {"4g.40gb": 1})
    # ... and a 2g.20gb (2, 2) beside the 3g.40gb leaves (2, 2): no room for a 4g.40gb
    assert not fits_mig_quota(A100, big, {"3g.40gb": 1, "2g.20gb": 1}, {"4g.40gb": 1})
    # memory binds too: 1g.20gb uses 1 compute but 2 memory slices; four of them use all 8
    assert fits_mig_quota(A100, big, {"1g.20gb": 3}, {"1g.20gb": 1})
    assert not fits_mig_quota(A100, big, {"1g.20gb": 4}, {"1g.10gb": 1})


def test_a_profile_the_gpu_lacks_and_a_gpu_without_mig() -> None:
    with pytest.raises(SpecError, match=r"unknown MIG profile '1g.5gb' on A100-80GB"):
        mig_charge(A100, "1g.5gb")
    with pytest.raises(SpecError, match="GPU T4 has no MIG support"):
        mig_charge(T4, "1g.10gb")


def test_resource_names() -> None:
    assert mig_resource("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert mig_profile_of("nvidia.com/mig-7g.80gb") == "7g.80gb"
    assert mig_profile_of("nvidia.com/mig-1g.10gb+me") == "1g.10gb+me"
    assert mig_profile_of("nvidia.com/gpu") is None
    assert mig_profile_of("nvidia.com/mig-big") is None


def _tessera(tmp_path: Path, mig: dict[str, object], flavor: str = "A100-80GB") -> Path:
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump({"queues": [{"name": "infer", "flavors": {
        flavor: {"nominal_gpus": 0, "mig": mig}}}]}))
    return p


def test_tessera_yaml_takes_mig_quota(tmp_path: Path) -> None:
    loaded = load_tenancy_file(_tessera(tmp_path, {
        "1g.10gb": {"nominal_slices": 7, "borrowing_limit_slices": 2},
        "7g.80gb": {"nominal_slices": 1}}))
    assert loaded.mig["infer"][A100] == {
        "1g.10gb": MigQuota("1g.10gb", 7, 2), "7g.80gb": MigQuota("7g.80gb", 1)}


@pytest.mark.parametrize(("mig", "flavor", "said"), [
    ({"1g.5gb": {"nominal_slices": 1}}, "A100-80GB", "MIG '1g.5gb': unknown MIG profile"),
    ({"1g.10gb": {"nominal_slices": 1}}, "T4", "GPU T4 has no MIG support"),
    ({"1g.10gb": {"nominal_slices": -1}}, "A100-80GB", "greater than or equal to 0"),
    ({"1g.10gb": {"nominal_slices": 0.5}}, "A100-80GB", "fractional part"),
    ({"1g.10gb": {"nominal_slices": 1, "lending_limit_slices": 2}}, "A100-80GB",
     "lending_limit_slices \\(2\\) exceeds nominal_slices \\(1\\)"),
], ids=["profile", "no-mig", "negative", "fractional", "lending"])
def test_bad_mig_quota_is_refused(tmp_path: Path, mig: dict[str, object], flavor: str,
                                  said: str) -> None:
    with pytest.raises(SpecError, match=said):
        load_tenancy_file(_tessera(tmp_path, mig, flavor))
