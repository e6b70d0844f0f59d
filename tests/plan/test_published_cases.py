"""The published-plan benchmark's cases build and plan (their gaps are for the benchmark)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tessera.perf.steptime import CostModel
from tessera.plan.api import plan_ranked

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_published_plans.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_published_plans", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_case_names_its_source_and_a_positive_measurement() -> None:
    bench = _bench()
    assert len(bench.CASES) >= 2
    for case in bench.CASES:
        assert "artifact" in case.source and case.published_samples_per_s > 0
        assert case.model().n_layers > 2 and sum(case.counts.values()) >= 16
        assert len(case.counts) >= 2                      # heterogeneous clusters only


def _plans(case: object, max_layers: int) -> None:
    ranked = plan_ranked(case.model(), case.counts, case.global_bsz,  # type: ignore[attr-defined]
                         cost_model=CostModel(estimate_unprofiled=True),
                         gpus_per_node=case.gpus_per_node,  # type: ignore[attr-defined]
                         links=case.links or None,  # type: ignore[attr-defined]
                         max_layers=max_layers)
    assert ranked.plan.throughput_samples_per_s > 0
    assert len(ranked.ranks) == sum(case.counts.values())  # type: ignore[attr-defined]
    assert _bench().shape(ranked)


def test_the_amp_case_plans_on_its_cluster_and_links() -> None:
    _plans(_bench().CASES[0], max_layers=6)            # coarse chain: fast, still real


def test_every_case_prices_its_gpus() -> None:
    rl = CostModel(estimate_unprofiled=True).roofline()
    for case in _bench().CASES:
        model = case.model()
        for flavor in case.counts:
            assert rl.sustained_flops_per_s(flavor, model.workload) > 0


@pytest.mark.slow
def test_the_flashflex_case_plans_on_its_cluster() -> None:
    _plans(_bench().CASES[1], max_layers=6)            # ~1 min on a loaded 2-core machine
