"""The kernels prior: counted work per job type and a roofline per job (issue 35, part 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.perf.estimate import SpeedEstimator, table_matrix
from tessera.perf.job_work import JobWork, table_work
from tessera.perf.kernel_prior import KernelModel, Roofline, work_matrix
from tessera.perf.tables import load_throughputs


@pytest.mark.parametrize("table", ["gavel", "sia"])
def test_every_job_type_of_both_tables_has_counted_work(table: str) -> None:
    job_types, _flavors, _logs = table_matrix(load_throughputs(table))
    work = table_work(job_types)
    assert len(work) == len(job_types)
    assert all(w.flops > 0 and w.bytes > 0 and w.kernels > 0 for w in work.values())


def test_counts_follow_the_model_and_the_batch() -> None:
    work = table_work(["ResNet-50 (batch size 32)", "ResNet-50 (batch size 64)",
                       "imagenet (batch size 40)", "ncf (batch size 32)"])
    small, large = work["ResNet-50 (batch size 32)"], work["ResNet-50 (batch size 64)"]
    # FLOPs are linear in the batch; a ResNet-50 step is ~3 x 4.1 GFLOP per 224x224 image
    assert large.flops == pytest.approx(2 * small.flops, rel=1e-3)
    assert small.flops / 32 == pytest.approx(24.3e9, rel=0.05)
    assert large.params == small.params == pytest.approx(25.6e6, rel=0.01)
    assert large.kernels == small.kernels
    # Sia's imagenet is the same ResNet-50; NCF is tiny
    assert work["imagenet (batch size 40)"].flops / 40 == pytest.approx(small.flops / 32)
    assert work["ncf (batch size 32)"].flops < 1e-3 * small.flops


def test_unknown_job_types_are_refused_by_name() -> None:
    with pytest.raises(SpecError, match="no counted work for job type 'my-llm'"):
        table_work(["ResNet-50 (batch size 32)", "my-llm"])


def test_roofline_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="bound one of"):
        Roofline("min", "fp32", 0.0)
    with pytest.raises(ValueError, match="overhead_s >= 0"):
        Roofline("max", "fp32", -1e-6)


def test_one_observation_tells_a_memory_bound_job_from_a_compute_bound_one() -> None:
    """The finding: one peak number per flavor cannot tell them apart; the job's counts can.

    On jobs that follow the roofline exactly (each at its own efficiency), one observation on
    P100 predicts V100 and T4 exactly, while the completion's peak-FLOP/s answer for a flavor
    no table covers is off for the memory-bound job.
    """
    flavors = ["P100", "V100-16GB", "T4"]
    roofline = Roofline("max", "fp32", 0.0)
    # compute-bound (1 TFLOP, 1 GB) and memory-bound (1 GFLOP, 100 GB) jobs, two of each
    work = work_matrix([JobWork(1e12, 1e9, 100, 1e6), JobWork(2e12, 2e9, 100, 1e6),
                        JobWork(1e9, 1e11, 100, 1e6), JobWork(2e9, 2e11, 100, 1e6)])
    efficiency = np.array([0.5, 0.3, 0.6, 0.4])
    truth = -np.log(roofline.core_s(work, flavors) / efficiency[:, None])
    refs = truth.copy()
    refs[:, 2] = math.nan  # T4: a flavor no reference job was measured on
    model = KernelModel(roofline, flavors, work, refs)
    seen = np.zeros_like(truth, dtype=bool)
    seen[:, 0] = True
    pred = model.predict_log(work, np.where(seen, truth, 0.0), seen)
    assert np.allclose(pred, truth)
    # the memory-bound jobs gain 900/732 from a V100, the compute-bound ones 15.7/9.3
    gain = np.exp(pred[:, 1] - pred[:, 0])
    assert gain[0] == pytest.approx(15.7 / 9.3) and gain[2] == pytest.approx(900 / 732)


def test_the_prior_alone_scales_with_the_work() -> None:
    flavors = ["P100", "V100-16GB"]
    roofline = Roofline("sum", "fp32", 0.0)
    work = work_matrix([JobWork(1e12, 1e10, 100, 1e6), JobWork(4e12, 4e10, 100, 1e6)])
    truth = -np.log(roofline.core_s(work, flavors) / 0.5)
    model = KernelModel(roofline, flavors, work, truth)
    none = np.zeros_like(truth, dtype=bool)
    pred = model.predict_log(work, np.zeros_like(truth), none)
    assert np.allclose(pred, truth)  # every reference at 50 %: the median is exact
    # the peak-only completion's prior is one rate for every job
    est = SpeedEstimator.from_table(load_throughputs("gavel"))
    prior = est.log_rows(np.zeros((2, 3)), np.zeros((2, 3), dtype=bool))
    assert np.allclose(prior[0], prior[1])
