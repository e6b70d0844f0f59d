"""Step 0 of ``--split planned`` comes from the data-parallel planner, or says why not.

Pure Python (no torch, no processes): the split is computed from the configuration alone.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tessera.errors import SpecError, TesseraError
from tessera.model.gpus import resolve_flavor
from tessera.plan.api import default_cost_model, plan_data_parallel
from tessera.train.balancer import BalancerConfig, proportional_split
from tessera.train.config import EXAMPLE_NAMES, TrainConfig, from_json
from tessera.train.devices import parse_devices, relative_speeds
from tessera.train.prior import (
    PLAN_MODELS,
    InitialSplit,
    SplitSource,
    planned_split,
    planner_models,
    raise_to_min_batch,
)

A100, T4 = resolve_flavor("A100"), resolve_flavor("T4")


def _per_flavor(devices: str, split: tuple[int, ...]) -> dict[str, Counter[int]]:
    out: dict[str, Counter[int]] = {}
    for slot, b in zip(parse_devices(devices), split, strict=True):
        out.setdefault(slot.flavor.short, Counter())[b] += 1
    return out


def test_every_example_has_a_plannable_model():
    assert set(PLAN_MODELS) == set(EXAMPLE_NAMES)
    assert set(PLAN_MODELS.values()) <= set(planner_models())
    assert PLAN_MODELS["cnn"] == "cifar10" and PLAN_MODELS["transformer"] == "bert"


@pytest.mark.parametrize("devices", ["A100:1,T4:2", "T4:1,A100:1,T4:1"])
def test_split_is_the_planners_for_a100_and_two_t4_with_cifar10(devices):
    cfg = TrainConfig("cnn", devices, global_batch=512)
    plan = plan_data_parallel("cifar10", {A100: 1, T4: 2}, 512)
    assert not plan.dropped  # at B = 512 the planner uses every GPU
    info = cfg.initial_split_info()
    assert info.source is SplitSource.PLANNER and info.plan_model == "cifar10"
    planned: dict[str, Counter[int]] = {}
    for s in plan.shares:
        planned.setdefault(s.flavor.short, Counter())[s.local_bsz] += 1
    assert _per_flavor(devices, info.split) == planned
    assert info.min_batch_ranks == ()
    assert info.planner_step_s == pytest.approx(plan.step_time_s)
    assert info.planner_samples_per_s == pytest.approx(plan.throughput_samples_per_s)
    assert cfg.initial_split() == info.split


def test_devices_the_planner_drops_start_at_min_batch():
    plan = plan_data_parallel("cifar10", {A100: 1, T4: 2}, 48)
    assert [(s.flavor.short, s.local_bsz) for s in plan.shares] == [("A100-80GB", 48)]
    assert [(d.flavor.short, d.count) for d in plan.dropped] == [("T4", 2)]
    info = TrainConfig("cnn", "A100:1,T4:2", global_batch=48).initial_split_info()
    assert info.split == (46, 1, 1) and info.min_batch_ranks == (1, 2)
    assert "idle" in info.reason and "minimum batch (1)" in info.reason
    wider = TrainConfig("cnn", "A100:1,T4:2", global_batch=48,
                        balancer=BalancerConfig(min_batch=3)).initial_split_info()
    assert wider.split == (42, 3, 3)


def test_min_batch_is_taken_from_the_predicted_slowest_rank():
    cm = default_cost_model()
    costs = [cm.device_cost("cifar10", f) for f in (A100, T4, T4)]
    # Rank 1 (a T4 at 40 samples) is predicted slower than the A100 at 50, so it pays.
    assert costs[1].step_time_s(40) > costs[0].step_time_s(50)
    assert raise_to_min_batch((50, 40, 0), costs, 1) == ((50, 39, 1), (2,))
    with pytest.raises(SpecError):
        raise_to_min_batch((1, 0, 0), costs, 1)


def test_unprofiled_flavor_falls_back_to_catalog_speeds_and_says_why():
    cfg = TrainConfig("cnn", "K80:1,V100:1", global_batch=48)
    info = cfg.initial_split_info()
    assert info.source is SplitSource.CATALOG
    assert info.split == proportional_split(relative_speeds(cfg.slots), 48)
    assert "no cifar10 profile for K80" in info.reason
    assert "V100" not in info.reason.split("(profiled")[0]  # only the missing flavor is named
    assert info.to_json()["initial_split_source"] == "catalog"
    assert info.planner_step_s is None


def test_batch_the_planner_cannot_fit_falls_back_to_catalog():
    info = TrainConfig("transformer", "T4:2", global_batch=1000).initial_split_info()
    assert info.source is SplitSource.CATALOG and info.split == (500, 500)
    assert "cannot fit a global batch of 1000 bert samples" in info.reason


def test_plan_model_overrides_the_examples_default():
    cfg = TrainConfig("cnn", "A100:1,T4:2", global_batch=96, plan_model="imagenet")
    plan = plan_data_parallel("imagenet", {A100: 1, T4: 2}, 96)
    info = cfg.initial_split_info()
    assert info.plan_model == "imagenet" and cfg.planner_model == "imagenet"
    assert info.split == tuple(s.local_bsz for s in plan.shares)
    assert info.split != TrainConfig("cnn", "A100:1,T4:2", global_batch=96).initial_split()
    assert from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"plan_model": "resnet"}, "unknown planner model 'resnet'"),
     ({"plan_model": "gpt_pmp"}, "unknown planner model"),
     ({"plan_model": "bert", "split": "equal"}, "only applies to split 'planned'")],
    ids=["unknown", "unfittable", "not-planned"],
)
def test_bad_plan_model_is_a_user_error(kwargs, fragment):
    with pytest.raises(SpecError, match=fragment) as err:
        TrainConfig("cnn", "A100:1,T4:2", **kwargs)
    assert isinstance(err.value, TesseraError)
    if "unknown" in fragment:
        assert "cifar10" in str(err.value)  # the message lists the known models


def test_prior_never_reads_the_emulated_speeds():
    base = TrainConfig("cnn", "A100:1,T4:2", global_batch=512)
    for speeds in [(0.1, 1.0, 1.0), (1.0, 1.0, 1.0)]:
        assert base.with_changes(speeds=speeds).initial_split() == base.initial_split()
    fallback = TrainConfig("cnn", "K80:1,V100:1", global_batch=48)
    assert fallback.with_changes(speeds=(5.0, 1.0)).initial_split() == \
        fallback.initial_split()


def test_equal_and_fixed_splits_name_their_source():
    equal = TrainConfig("mlp", "A100:1,T4:2", global_batch=20, split="equal")
    fixed = TrainConfig("mlp", "A100:1,T4:2", global_batch=20, split="fixed",
                        fixed_split=(10, 5, 5))
    assert equal.initial_split_info().source is SplitSource.EQUAL
    assert fixed.initial_split_info() == InitialSplit((10, 5, 5), SplitSource.FIXED,
                                                      "given explicitly")
    assert fixed.initial_split_info().to_json()["plan_model"] is None


def test_describe_names_the_source():
    info = TrainConfig("cnn", "A100:1,T4:2", global_batch=512).initial_split_info()
    assert info.describe().startswith(f"initial split {list(info.split)} from the planner: "
                                      "planned as cifar10, predicted ")


def test_a_model_without_profiles_falls_back_to_catalog():
    slots = parse_devices("A100:1,T4:2")
    info = planned_split(slots, 48, "no-such-model")
    assert info.source is SplitSource.CATALOG and info.plan_model == "no-such-model"
    assert info.split == proportional_split(relative_speeds(slots), 48)
    assert "cannot plan it: no profile for model 'no-such-model'" in info.reason
