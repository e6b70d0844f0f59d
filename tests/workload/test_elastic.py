"""Elastic jobs: the range is validated, checked against the profiles and the cluster, and a
model without efficiency data stays rigid with a note."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import ElasticRange
from tessera.perf.efficiency import load_efficiency
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.feasibility import infeasibility
from tessera.sched.core.oracle import ThroughputOracle
from tessera.workload.elastic import (
    elastic_or_rigid,
    elastic_range,
    rigid_duration_s,
    tuned_from_m0,
)
from tests.builders import RESNET, make_cluster, make_job, make_workload


def _range(lo: int = 1, hi: int = 16, b0: int = 128, b1: int = 4096) -> ElasticRange:
    return ElasticRange(lo, hi, b0, b1, "cifar10", 5e6)


@pytest.mark.parametrize(
    ("args", "match"),
    [((4, 2, 128, 4096), "min_gpus <= max_gpus, got 4-2"),
     ((0, 2, 128, 4096), "1 <= min_gpus"),
     ((1, 2, 512, 256), "initial batch <= max batch, got 512-256")],
    ids=["min-above-max", "zero-min", "initial-above-max-batch"],
)
def test_an_inconsistent_range_is_refused(args: tuple[int, int, int, int], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        _range(*args)


def test_the_requested_count_must_lie_in_the_range() -> None:
    assert make_job("a", 4, elastic=_range(2, 8)).elastic == _range(2, 8)
    with pytest.raises(SpecError, match="asks for 12 GPUs, outside its elastic range 2-8"):
        make_job("a", 12, elastic=_range(2, 8))


def test_a_range_is_checked_against_the_profiled_batches() -> None:
    r = elastic_range("yolov3", 4, 64)
    assert (r.initial_batch_samples, r.max_batch_samples, r.min_gpus) == (64, 512, 1)
    with pytest.raises(SpecError, match="initial batch 4 is outside the profiled range 8-512"):
        elastic_range("yolov3", 4, 4)
    with pytest.raises(SpecError, match="maximum batch 1024 is outside the profiled range"):
        elastic_range("yolov3", 4, 64, max_batch_samples=1024)


def test_a_model_without_efficiency_data_runs_rigid_with_a_note() -> None:
    # gpt_pmp is profiled (step times) but has no validation curves of its own.
    notes: set[str] = set()
    assert elastic_or_rigid("gpt_pmp", 8, 16, notes) is None
    assert notes == {"gpt_pmp: no statistical-efficiency data; its jobs run rigid"}
    assert elastic_or_rigid("cifar10", 8, 2048, notes) is not None and len(notes) == 1


def test_an_elastic_minimum_above_the_cluster_is_explained_at_feasibility() -> None:
    c = make_cluster().node("v100", gpus=8, count=2).build()
    oracle = ThroughputOracle(default_throughputs(), c)
    job = make_job("x", 32, job_type=RESNET, elastic=_range(24, 64))
    reason = infeasibility(job, c, oracle)
    assert reason == ("its elastic range needs at least 24 GPUs; the largest allowed flavor "
                      "pool has 16")
    fits = make_job("y", 8, job_type=RESNET, elastic=_range(4, 64))
    assert infeasibility(fits, c, oracle) is None


def test_rigid_duration_refuses_what_was_never_measured() -> None:
    with pytest.raises(SpecError, match="outside the profiled range 20-640"):
        rigid_duration_s("deepspeech2", resolve_flavor("V100"), 4, 1280)
    assert rigid_duration_s("deepspeech2", resolve_flavor("V100"), 4, 320) > 0


def test_tuned_from_m0_starts_elastic_batches_at_the_models_smallest_validated_batch() -> None:
    m0 = load_efficiency("bert").initial_batch_samples
    elastic = replace(make_job("e", gpus=2), elastic=elastic_range("bert", 2, 384))
    rigid = make_job("r", gpus=2)
    tuned = tuned_from_m0(make_workload(elastic, rigid))
    assert m0 < 384
    e = tuned.jobs[0].elastic
    assert e is not None and e.initial_batch_samples == m0
    assert e.max_batch_samples == elastic.elastic.max_batch_samples  # type: ignore[union-attr]
    assert tuned.jobs[1] == rigid
    assert any("M0" in n for n in tuned.notes)
