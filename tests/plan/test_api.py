"""Model-level planner entry points (tessera.plan.api)."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor, resolve_flavors
from tessera.plan.api import nodes_for, parse_devices, plan_data_parallel, predict_mixed_throughput


def test_parse_devices_adds_repeats_and_resolves_aliases() -> None:
    got = parse_devices("v100:2, T4:1,V100-16GB:3")
    assert {f.short: n for f, n in got.items()} == {"V100-16GB": 5, "T4": 1}


def test_nodes_for_packs_each_flavor() -> None:
    nodes = nodes_for({resolve_flavor("T4"): 10}, gpus_per_node=4)
    assert [n.gpus for n in nodes] == [4, 4, 2]
    assert len({n.node_id for n in nodes}) == 3


def test_mixed_throughput_beats_either_part_and_respects_bound() -> None:
    both = predict_mixed_throughput("imagenet", parse_devices("V100:4,T4:4"))
    v100 = predict_mixed_throughput("imagenet", parse_devices("V100:4"))
    t4 = predict_mixed_throughput("imagenet", parse_devices("T4:4"))
    assert both > max(v100, t4)
    plan = plan_data_parallel("imagenet", parse_devices("V100:4,T4:4"), 4 * 600 + 4 * 200)
    assert both == pytest.approx(plan.throughput_samples_per_s)
    assert plan.efficiency <= 1.0


def test_mixed_throughput_with_explicit_batch_and_empty_mix() -> None:
    v100 = resolve_flavor("V100")
    assert predict_mixed_throughput("imagenet", {v100: 0}) == 0.0
    x = predict_mixed_throughput("cifar10", parse_devices("A100-40GB:2,RTX-2080Ti:2"), 2048)
    assert x > 0
    with pytest.raises(SpecError):
        predict_mixed_throughput("imagenet", {v100: -1})


def test_balanced_split_beats_equal_split() -> None:
    """The point of the planner: an equal split waits for the slowest GPU."""
    from tessera.plan.api import default_cost_model

    cm = default_cost_model()
    plan = plan_data_parallel("imagenet", parse_devices("A100-40GB:4,T4:4"), 800)
    equal_compute = max(cm.fit("imagenet", f).step_time_s(100)
                        for f in resolve_flavors(("A100-40GB", "T4")))
    assert plan.compute_time_s < equal_compute


def test_sixty_four_devices_plan() -> None:
    """The split covers the batch (the 10 ms target is in benchmarks/bench_plan.py)."""
    devices = parse_devices("A100-40GB:16,V100:16,T4:16,RTX-2080Ti:16")
    plan = plan_data_parallel("imagenet", devices, 6400)
    assert sum(s.local_bsz for s in plan.shares) == 6400
