"""Tessera's tenancy YAML (issue 32, part 5): per-flavor quotas, cohort trees, fair sharing,
priority classes and local queues read into the decision core's typed values; old files keep
working; every bad value refused at load with the object and the field named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tessera.errors import SpecError
from tessera.live.tenancy import CONFIG_NAME, hash_token, load_tenancy
from tessera.live.tenancy_file import load_tenancy_file
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.quotas import (
    FlavorQuota,
    ReclaimWithinCohort,
    WhenCanBorrow,
    WithinQueue,
)
from tessera.sched.core.tenancy import FairPreemption

A100 = resolve_flavor("A100-80GB")
V100 = resolve_flavor("V100")

FULL: dict[str, Any] = {
    "queues": [
        {"name": "vision", "cohort": "research",
         "flavors": {"A100-80GB": {"nominal_gpus": 4, "borrowing_limit_gpus": 2,
                                   "lending_limit_gpus": 0},
                     "v100": {"nominal_gpus": 2}},
         "preemption": {"reclaim_within_cohort": "LowerPriority",
                        "within_queue": "LowerPriority"},
         "fungibility": {"when_can_borrow": "TryNextFlavor"},
         "min_admitted_s": 600, "weight": 2},
        {"name": "legacy", "nominal_gpus": 8, "borrowing_limit_gpus": 4},
    ],
    "cohorts": [{"name": "org"}, {"name": "research", "parent": "org", "weight": 3,
                                   "flavors": {"A100-80GB": {"nominal_gpus": 0,
                                                             "borrowing_limit_gpus": 8}}}],
    "fair_sharing": {"enabled": True, "strategies": ["LessThanInitialShare"],
                     "usage_half_life_s": 3600},
    "priority_classes": [{"name": "high", "value": 1000}],
    "local_queues": [{"name": "vision-team", "namespace": "team-a", "cluster_queue": "vision"}],
}


def write(tmp_path: Path, doc: Any, name: str = "tenancy.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_every_key_becomes_its_typed_value(tmp_path: Path) -> None:
    tree = load_tenancy_file(write(tmp_path, FULL)).tree
    vision = tree.queues["vision"]
    assert list(vision.flavors) == [A100, V100]  # preference order kept
    assert vision.flavors[A100] == FlavorQuota(4, 2, 0)
    assert vision.flavors[V100] == FlavorQuota(2, None, None)
    assert (vision.nominal_gpus, vision.cohort, vision.weight, vision.min_admitted_s) == (
        6, "research", 2.0, 600.0)
    assert vision.preemption.reclaim_within_cohort is ReclaimWithinCohort.LOWER_PRIORITY
    assert vision.preemption.within_queue is WithinQueue.LOWER_PRIORITY
    assert vision.fungibility.when_can_borrow is WhenCanBorrow.TRY_NEXT_FLAVOR
    legacy = tree.queues["legacy"]
    assert (legacy.by_flavor, legacy.nominal_gpus, legacy.borrowing_limit_gpus) == (False, 8, 4)
    assert tree.cohorts["research"].parent == "org"
    assert tree.cohorts["research"].flavors[A100] == FlavorQuota(0, 8, None)
    assert tree.cohorts["research"].weight == 3.0
    assert tree.fair_sharing.enabled and tree.fair_sharing.usage_half_life_s == 3600
    assert tree.fair_sharing.strategies == (FairPreemption.LESS_THAN_INITIAL_SHARE,)
    assert tree.priority_classes["high"].value == 1000
    assert tree.cluster_queue("vision-team") == "vision"
    assert tree.ancestors("research") == ("research", "org")


def _config(state: Path, extra: dict[str, Any]) -> None:
    state.mkdir(mode=0o700)
    cfg = {"tokens": [{"name": "admin", "sha256": hash_token("x"), "queue": None}], **extra}
    (state / CONFIG_NAME).write_text(yaml.safe_dump(cfg, sort_keys=False))


def test_an_old_config_keeps_working_and_gets_its_quota_tree(tmp_path: Path) -> None:
    """Today's file (one number per queue) loads unchanged; the service's tenancy carries the
    typed tree as ``quota_tree``."""
    _config(tmp_path / "s", {"queues": [
        {"name": "vision", "nominal_gpus": 8, "borrowing_limit_gpus": 4, "weight": 1.0},
        {"name": "nlp", "nominal_gpus": 8, "borrowing_limit_gpus": 0}]})
    t = load_tenancy(tmp_path / "s")
    assert t.quotas["vision"].nominal_gpus == 8 and t.quotas["nlp"].borrowing_limit_gpus == 0
    assert t.quota_tree.queues == t.quotas and not t.quota_tree.cohorts


def test_the_service_config_takes_the_new_keys_beside_its_tokens(tmp_path: Path) -> None:
    _config(tmp_path / "s", FULL)
    t = load_tenancy(tmp_path / "s")
    assert t.quota_tree.queues["vision"].flavors[A100] == FlavorQuota(4, 2, 0)
    assert t.quota_tree.priority_classes["high"].value == 1000


def test_tenancy_flag_replaces_the_configs_quotas(tmp_path: Path) -> None:
    _config(tmp_path / "s", {"queues": [{"name": "vision", "nominal_gpus": 1}]})
    t = load_tenancy(tmp_path / "s", write(tmp_path, FULL))
    assert set(t.quotas) == {"vision", "legacy"} and t.quotas["vision"].by_flavor
    _config(tmp_path / "s2", {"queues": [{"name": "other", "nominal_gpus": 1}]})
    with pytest.raises(SpecError, match=r"queue 'other' is not a queue of --tenancy"):
        load_tenancy(tmp_path / "s2", write(tmp_path, FULL))


def _with(change: dict[str, Any]) -> dict[str, Any]:
    return {**FULL, **change}


def _queue(**fields: Any) -> dict[str, Any]:
    return _with({"queues": [{"name": "vision", **fields}]})


# Bad input: each refused at load, naming the object and the field.

def test_a_queue_in_a_cohort_that_does_not_exist(tmp_path: Path) -> None:
    bad = _queue(nominal_gpus=1, cohort="nowhere")
    with pytest.raises(SpecError, match=r"queue 'vision': cohort 'nowhere' does not exist"):
        load_tenancy_file(write(tmp_path, bad))


def test_a_cycle_of_cohorts(tmp_path: Path) -> None:
    bad = _with({"cohorts": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}],
                 "queues": [{"name": "vision", "nominal_gpus": 1}]})
    with pytest.raises(SpecError, match=r"cycle of cohorts a -> b -> a"):
        load_tenancy_file(write(tmp_path, bad))


def test_quota_for_a_flavor_the_cluster_lacks(tmp_path: Path) -> None:
    p = write(tmp_path, FULL)
    load_tenancy_file(p, [A100, V100])
    with pytest.raises(SpecError, match=r"queue 'vision': quota for flavor "
                       r"'Tesla-V100-SXM2-16GB', which the cluster does not have"):
        load_tenancy_file(p, [A100])


def test_an_unknown_flavor_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"queue 'vision': flavors: unknown GPU flavor 'Z9'"):
        load_tenancy_file(write(tmp_path, _queue(flavors={"Z9": {"nominal_gpus": 1}})))


@pytest.mark.parametrize(("value", "msg"), [
    (-1, "greater than or equal to 0"), (1.5, "fractional part")], ids=["negative", "1.5"])
def test_negative_or_fractional_gpu_quotas(tmp_path: Path, value: float, msg: str) -> None:
    bad = _queue(flavors={"A100": {"nominal_gpus": value}})
    with pytest.raises(SpecError, match=rf"queue 'vision': flavors\.A100\.nominal_gpus: .*{msg}"):
        load_tenancy_file(write(tmp_path, bad))
    with pytest.raises(SpecError, match=rf"queue 'vision': borrowing_limit_gpus: .*{msg}"):
        load_tenancy_file(write(tmp_path, _queue(nominal_gpus=1, borrowing_limit_gpus=value)))


def test_a_local_queue_pointing_nowhere(tmp_path: Path) -> None:
    bad = _with({"local_queues": [{"name": "lq", "cluster_queue": "gone"}]})
    with pytest.raises(SpecError, match=r"local queue 'lq': cluster_queue 'gone' does not exist"):
        load_tenancy_file(write(tmp_path, bad))


def test_a_weight_below_zero(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"queue 'vision': weight: .*greater than or equal to 0"):
        load_tenancy_file(write(tmp_path, _queue(nominal_gpus=1, weight=-0.5)))
    bad = _with({"cohorts": [{"name": "org", "weight": -1}, FULL["cohorts"][1]]})
    with pytest.raises(SpecError, match=r"cohort 'org': weight: .*greater than or equal to 0"):
        load_tenancy_file(write(tmp_path, bad))


def test_a_weight_of_zero_is_accepted(tmp_path: Path) -> None:
    """Weight 0 means "only borrows idle capacity" (issue 32, part 3)."""
    tree = load_tenancy_file(write(tmp_path, _queue(nominal_gpus=1, weight=0))).tree
    assert tree.queues["vision"].weight == 0


def test_an_unsupported_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"queue 'vision': admission_checks: Extra inputs"):
        load_tenancy_file(write(tmp_path, _queue(nominal_gpus=1, admission_checks=["x"])))
    with pytest.raises(SpecError, match=r"tenancy.yaml: topology: Extra inputs"):
        load_tenancy_file(write(tmp_path, _with({"topology": {}})))


def test_one_number_and_per_flavor_together_are_refused(tmp_path: Path) -> None:
    bad = _queue(nominal_gpus=1, flavors={"A100": {"nominal_gpus": 1}})
    with pytest.raises(SpecError, match=r"queue 'vision': .*not both"):
        load_tenancy_file(write(tmp_path, bad))


def test_a_lending_limit_above_nominal(tmp_path: Path) -> None:
    bad = _queue(flavors={"A100": {"nominal_gpus": 1, "lending_limit_gpus": 2}})
    with pytest.raises(SpecError, match=r"queue 'vision' flavor .*lending_limit_gpus \(2\) "
                       r"exceeds nominal_gpus \(1\)"):
        load_tenancy_file(write(tmp_path, bad))


def test_the_service_config_refuses_the_same_bad_input(tmp_path: Path) -> None:
    """The bad values are refused in ``tessera-live.yaml`` too, naming the file and object."""
    _config(tmp_path / "s", _queue(nominal_gpus=1, cohort="nowhere"))
    with pytest.raises(SpecError, match=f"{CONFIG_NAME}: queue 'vision': cohort 'nowhere'"):
        load_tenancy(tmp_path / "s")
