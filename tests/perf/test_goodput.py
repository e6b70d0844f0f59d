"""Goodput per configuration and the best batch, against hand computations from the CSVs."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tessera.errors import NoProfileError, SpecError, TraceFormatError
from tessera.model.gpus import resolve_flavor
from tessera.perf.goodput import best_batch, goodput, load_step_times, packed_placement
from tests.sia_hand import BUNDLED, rows, step_sync


def _hand_efficiency(model: str, batch: int, epoch: int, m0: int) -> float:
    r = rows(BUNDLED / model / f"validation-{batch}.csv")[epoch]
    phi = m0 * float(r["grad_var"]) / float(r["grad_sqr"])
    return (phi + m0) / (phi + batch)


def _progress_in(model: str, batch: int, epoch: int, m0: int) -> float:
    data = rows(BUNDLED / model / f"validation-{batch}.csv")
    return (float(data[epoch - 1]["progress"]) + float(data[epoch]["progress"])) / 2 * m0


def test_goodput_without_accumulation_is_throughput_times_efficiency() -> None:
    # cifar10, 512 samples on one V100 server of 4 GPUs: 128 per GPU, one pass.
    step, _sync = step_sync(BUNDLED, "cifar10", "azure", [4], 128)
    progress = _progress_in("cifar10", 512, 20, 128)
    est = goodput("cifar10", resolve_flavor("V100"), (4,), 512, progress)
    assert (est.config.local_batch_samples, est.config.accumulation_steps) == (128, 1)
    assert est.iteration_time_s == pytest.approx(step)
    assert est.throughput_samples_per_s == pytest.approx(512 / step)
    eff = _hand_efficiency("cifar10", 512, 20, 128)
    assert est.efficiency == pytest.approx(eff)
    assert est.goodput_samples_per_s == pytest.approx(512 / step * eff)


def test_accumulation_lets_bert_keep_its_batch_on_a_t4() -> None:
    # bert at 384 on 4 T4s: the T4 fits at most 12 per GPU, so 8 passes of 12 per iteration,
    # computing 8 times and synchronising once.
    biggest = max(int(r["local_bsz"]) for r in rows(BUNDLED / "bert" / "placements-aws.csv")
                  if r["placement"] == "4")
    passes = math.ceil(384 / (4 * biggest))
    step, sync = step_sync(BUNDLED, "bert", "aws", [4], 384 / (4 * passes))
    est = goodput("bert", resolve_flavor("T4"), (4,), 384, 0.0)
    assert (biggest, passes, est.config.accumulation_steps) == (12, 8, 8)
    assert est.iteration_time_s == pytest.approx(passes * (step - sync) + sync)


def test_servers_in_any_order_are_the_same_placement() -> None:
    a = goodput("imagenet", resolve_flavor("V100"), (8, 4), 1600, 0.0)
    b = goodput("imagenet", resolve_flavor("V100"), (4, 8), 1600, 0.0)
    assert a == b
    assert packed_placement(12, 8) == (8, 4) and packed_placement(8, 4) == (4, 4)


@pytest.mark.parametrize("epoch", [1, 80])
def test_best_batch_is_the_best_of_every_measured_split(epoch: int) -> None:
    # Brute force by hand over the documented grid: 8 GPUs x fewest passes x measured local
    # batch, and the range's two ends.
    progress = _progress_in("cifar10", 128, epoch, 128)
    measured = sorted({int(r["local_bsz"]) for r in rows(BUNDLED / "cifar10" /
                       "placements-azure.csv") if r["placement"] == "8"})
    curves = sorted(int(p.stem.split("-")[1]) for p in (BUNDLED / "cifar10").glob("validation-*"))
    best = (0.0, 0.0)
    lowest = max(128, 8 * measured[0])  # the initial batch, or every GPU's smallest share
    splits = {8 * k * b for k in range(1, 20) for b in measured} | {lowest, 4096}
    for m in sorted(splits):
        passes = math.ceil(m / (8 * measured[-1]))  # fewest passes that fit in memory
        on_grid = m / (8 * passes) in measured or m in (lowest, 4096)
        if lowest <= m <= 4096 and on_grid:
            step, sync = step_sync(BUNDLED, "cifar10", "azure", [8], m / (8 * passes))
            lo = max(c for c in curves if c <= m)
            hi = min(c for c in curves if c >= m)
            e_lo = rows(BUNDLED / "cifar10" / f"validation-{lo}.csv")[epoch]
            e_hi = rows(BUNDLED / "cifar10" / f"validation-{hi}.csv")[epoch]
            w = 0.0 if hi == lo else (m - lo) / (hi - lo)
            sqr = float(e_lo["grad_sqr"]) + w * (float(e_hi["grad_sqr"]) - float(e_lo["grad_sqr"]))
            var = float(e_lo["grad_var"]) + w * (float(e_hi["grad_var"]) - float(e_lo["grad_var"]))
            eff = (128 * var / sqr + 128) / (128 * var / sqr + m)
            best = max(best, (m / (passes * (step - sync) + sync) * eff, m))
    got = best_batch("cifar10", resolve_flavor("V100"), (8,), progress)
    assert got.goodput_samples_per_s == pytest.approx(best[0], rel=1e-6)
    assert got.config.global_batch_samples == best[1]


def test_large_batches_win_late_in_training() -> None:
    early = best_batch("cifar10", resolve_flavor("V100"), (8,), 1e5)
    late = best_batch("cifar10", resolve_flavor("V100"), (8,), 4.5e6)
    assert early.config.global_batch_samples < late.config.global_batch_samples


def test_best_batch_stays_in_a_jobs_declared_range() -> None:
    # In its first epoch cifar10 on 8 V100s prefers a small batch; a job that declared an
    # initial batch of 2048 is searched from there up.
    free = best_batch("cifar10", resolve_flavor("V100"), (8,), 0.0)
    held = best_batch("cifar10", resolve_flavor("V100"), (8,), 0.0, min_batch=2048, max_batch=3000)
    assert free.config.global_batch_samples < 2048
    assert 2048 <= held.config.global_batch_samples <= 3000


def test_best_batch_refuses_impossible_configurations() -> None:
    with pytest.raises(SpecError, match="8192 is outside the profiled range"):
        best_batch("cifar10", resolve_flavor("V100"), (8,), 0.0, max_batch=8192)
    # bert: at least 4 samples per GPU on 16 GPUs is 64, above a declared maximum of 48.
    with pytest.raises(SpecError, match=r"at least 64 \(4 per GPU\), above the maximum 48"):
        best_batch("bert", resolve_flavor("V100"), (8, 8), 0.0, max_batch=48)
    with pytest.raises(NoProfileError, match="never measured"):
        goodput("cifar10", resolve_flavor("T4"), (9,), 1024, 0.0)


def _scalability(model: str, suffix: str, nodes: int, gpus: int) -> dict[int, tuple[float, float]]:
    return {int(r["local_bsz"]): (float(r["step_time"]), float(r["sync_time"]))
            for r in rows(BUNDLED / model / f"scalability-{suffix}.csv")
            if int(r["num_nodes"]) == nodes and int(r["num_replicas"]) == gpus}


def test_a_gang_beyond_the_placement_files_takes_the_scalability_rows() -> None:
    # 24 T4s on six servers: no placement file has it, Sia's scalability file measured it.
    # At a measured (servers, GPUs, local batch) the interpolation returns the row itself.
    measured = _scalability("deepspeech2", "aws", 6, 24)
    times = load_step_times("deepspeech2", resolve_flavor("T4"))
    assert times.measured_local_batches((4,) * 6) == tuple(sorted(measured))
    for b, (step, sync) in measured.items():
        assert times.step_and_sync_s((4,) * 6, b) == pytest.approx((step, sync), rel=1e-9)
    est = goodput("deepspeech2", resolve_flavor("T4"), (4,) * 6, 24 * 20, 0.0)
    assert est.iteration_time_s == pytest.approx(measured[20][0], rel=1e-9)


def test_a_gang_between_measured_sizes_is_interpolated_inside_the_measured_hull() -> None:
    # 20 T4s on five servers lies between the four-server placements and the six-server
    # scalability rows: answered, between its neighbours at the same local batch.
    times = load_step_times("deepspeech2", resolve_flavor("T4"))
    step, _sync = times.step_and_sync_s((4,) * 5, 20)
    four, _ = step_sync(BUNDLED, "deepspeech2", "aws", [4, 4, 4, 4], 20)
    six = _scalability("deepspeech2", "aws", 6, 24)[20][0]
    assert min(four, six) <= step <= max(four, six)
    with pytest.raises(NoProfileError, match="beyond them the scalability rows"):
        times.step_and_sync_s((9,), 20)  # nine GPUs on one server: outside the hull


def test_a_bad_scalability_row_is_named(tmp_path: Path) -> None:
    model = tmp_path / "cifar10"
    model.mkdir()
    shutil.copy(BUNDLED / "cifar10" / "placements-aws.csv", model)
    (model / "scalability-aws.csv").write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,24.5,32,1.0,0.1\n")
    with pytest.raises(TraceFormatError, match=r"cifar10/scalability-aws.csv:2.*must be whole"):
        load_step_times("cifar10", resolve_flavor("T4"), root=tmp_path)
