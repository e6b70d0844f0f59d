"""The gang scaling prior from the same-model job types nearest in batch size (issue 35 part 3).

A gang's per-GPU efficiency follows its batch size (Sia's DeepSpeech2 on 12 RTX 2080 Ti GPUs
keeps 44 % per GPU at batch 10 and 89 % at batch 57), so the prior averages only the
:data:`NEAREST_BATCH` same-model job types nearest the job's batch size.
"""

from __future__ import annotations

import math

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.scaling_prior import NEAREST_BATCH, ScalingPrior, batch_size_of
from tessera.perf.tables import load_throughputs

SIA = load_throughputs("sia")
RTX = resolve_flavor("RTX-2080Ti")
JOB = "deepspeech2 (batch size 57)"


def _eff(job_type: str, num_gpus: int) -> float:
    return SIA.throughput(job_type, RTX, num_gpus) / (num_gpus * SIA.throughput(job_type, RTX, 1))


def test_batch_size_of_reads_the_job_types_name() -> None:
    assert batch_size_of("ResNet-50 (batch size 64)") == 64
    assert batch_size_of("A3C") is None
    assert batch_size_of("cifar10 (batch size 0)") is None


def test_the_prior_is_the_nearest_batch_sizes_geometric_mean() -> None:
    # DeepSpeech2 measured at 12 RTX GPUs: batch 10, 14, 20, 28, 40 (57 is the job itself)
    nearest = ["deepspeech2 (batch size 40)", "deepspeech2 (batch size 28)",
               "deepspeech2 (batch size 20)"][:NEAREST_BATCH]
    want = math.exp(sum(math.log(_eff(t, 12)) for t in nearest) / len(nearest))
    assert ScalingPrior(SIA).efficiency(JOB, RTX, 12) == pytest.approx(want)


def test_the_nearest_batch_prior_is_closer_to_the_truth_than_all_batch_sizes() -> None:
    true = _eff(JOB, 12)  # 0.89
    others = [f"deepspeech2 (batch size {b})" for b in (10, 14, 20, 28, 40)]
    all_sizes = math.exp(sum(math.log(_eff(t, 12)) for t in others) / len(others))  # 0.55
    prior = ScalingPrior(SIA).efficiency(JOB, RTX, 12)  # 0.62
    assert abs(math.log(prior / true)) < abs(math.log(all_sizes / true)) - 0.1
