"""ITP, FGD and Sia readers: golden files, documented filters, and bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tessera.errors import TraceFormatError
from tessera.workload import load_trace, read_trace
from tests.sia_hand import BUNDLED, last_iteration, rigid_duration_s, step_sync

# -- ITP ---------------------------------------------------------------------------------------


def test_itp_directory_is_one_workload_with_cluster_queues(golden: Path) -> None:
    wl = load_trace(golden / "itp_dir")
    assert [(j.job_id, j.submit_time_s, j.queue) for j in wl.jobs] == [
        ("a2", 50.0, "cluster01"), ("b1", 75.0, "cluster02"), ("a1", 100.0, "cluster01"),
    ]
    assert wl.jobs[1].num_gpus == 64  # unprofiled gang size: extrapolated
    assert any("extrapolated" in n for n in wl.notes)
    assert any("sorted by submit time" in n for n in wl.notes)


def test_itp_duplicate_across_files_names_the_file(golden: Path, tmp_path: Path) -> None:
    d = tmp_path / "itp"
    d.mkdir()
    for name in ("cluster01.csv", "cluster02.csv"):
        (d / name).write_text((golden / "itp_dir" / "cluster01.csv").read_text())
    with pytest.raises(TraceFormatError) as info:
        load_trace(d)
    assert info.value.path.endswith("cluster02.csv")
    assert (info.value.line, info.value.field) == (2, "job_id")
    assert "cluster01.csv line 2" in str(info.value)


@pytest.mark.slow
def test_itp_full(shared: Callable[[str], Path]) -> None:
    shared("microsoft_itp_elasticflow/raw")
    wl = load_trace("itp")
    assert len(wl) == 69351
    gpu_hours = sum((j.duration_hint_s or 0) * j.num_gpus for j in wl.jobs) / 3600
    assert gpu_hours == pytest.approx(1_632_719.7, abs=0.1)
    assert len({j.queue for j in wl.jobs}) == 10


def test_itp_generated_deadline_becomes_slo(shared: Callable[[str], Path]) -> None:
    path = shared("microsoft_itp_elasticflow/elasticflow_generated/195job.csv")
    wl = load_trace(path)
    assert len(wl) == 195
    assert all(j.slo_factor is not None and 0.4 < j.slo_factor < 1.6 for j in wl.jobs)


# -- FGD ---------------------------------------------------------------------------------------


def test_fgd_golden(golden: Path) -> None:
    wl = load_trace(golden / "fgd_small.csv")
    by_id = {j.job_id: j for j in wl.jobs}
    assert sorted(by_id) == ["pod-0", "pod-1", "pod-3", "pod-5"]
    assert by_id["pod-1"].gpu_milli == 460 and "gpu_milli" not in by_id["pod-1"].extra
    assert [f.name for f in by_id["pod-1"].flavors] == ["Tesla-T4"]
    assert by_id["pod-1"].duration_hint_s == 898.0  # deletion - scheduled
    assert [f.short for f in by_id["pod-3"].flavors] == ["V100-16GB", "V100-32GB"]
    assert [f.short for f in by_id["pod-5"].flavors] == ["P100"]  # G2 dropped, raw kept
    assert by_id["pod-5"].extra["gpu_spec"] == "G2|P100"
    assert by_id["pod-0"].gpu_milli is None
    notes = " | ".join(wl.notes)
    assert "filtered 1 rows: CPU-only" in notes
    assert "filtered 1 rows: never scheduled" in notes
    assert "filtered 1 rows: constrained only to undisclosed" in notes


FGD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
FGD_BAD = [
    ("unknown flavor", "p,1,1,1,1000,T4|X999,LS,Running,0,10,0\n", "gpu_spec"),
    ("deleted before scheduled", "p,1,1,1,1000,,LS,Running,0,10,20\n", "deletion_time"),
    ("negative creation", "p,1,1,1,1000,,LS,Running,-5,10,0\n", "creation_time"),
    ("share over one GPU", "p,1,1,1,1500,,LS,Running,0,10,0\n", "gpu_milli"),
    ("wrong type", "p,1,1,one,1000,,LS,Running,0,10,0\n", "num_gpu"),
]


@pytest.mark.parametrize(("row", "field"), [b[1:] for b in FGD_BAD], ids=[b[0] for b in FGD_BAD])
def test_fgd_bad_input(tmp_path: Path, row: str, field: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(FGD_HEADER + row)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (2, field)


def test_fgd_variant_without_times_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "multigpu50.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (1, "creation_time")


def test_fgd_real_default_matches_task_mix(shared: Callable[[str], Path]) -> None:
    shared("alibaba_gpu_2023/openb_pod_list_default.csv")
    wl = load_trace("fgd")
    # 8,152 tasks - 1,088 CPU-only - 861 GPU tasks never scheduled
    assert len(wl) == 6203
    assert sum(j.gpu_milli is not None for j in wl.jobs) > 2000
    spec = load_trace("fgd-gpuspec33")
    constrained = [j for j in spec.jobs if j.flavors]
    assert len(constrained) > 1000


# -- Sia ---------------------------------------------------------------------------------------


def test_sia_golden(golden: Path) -> None:
    wl = load_trace(golden / "sia_small.csv")
    types = [j.job_type for j in wl.jobs]
    # cifar10: per-GPU batch 2048/6 ≈ 341 → ResNet-18 bs 256; imagenet 512/4 = 128 → ResNet-50
    # bs 128; bert 12/1 → Transformer bs 16 (nearest in log scale)
    assert types == [
        "ResNet-18 (batch size 256)", "ResNet-50 (batch size 128)", "Transformer (batch size 16)",
    ]
    assert [j.num_gpus for j in wl.jobs] == [6, 4, 1]
    # bert at batch 12 on one V100: the 14,774 steps of its validation-12 curve, at the measured
    # step time of local batch 12 on placement "1" (no accumulation, nothing to synchronise).
    step, _sync = step_sync(BUNDLED, "bert", "azure", [1], 12)
    assert last_iteration(BUNDLED, "bert", 12) == 14774
    assert wl.jobs[2].duration_hint_s == pytest.approx(14774 * step)
    assert wl.jobs[0].duration_hint_s == pytest.approx(
        rigid_duration_s(BUNDLED, "cifar10", 6, 2048))
    assert all(j.elastic is not None for j in wl.jobs)
    assert any("validation curve" in n for n in wl.notes)


def test_sia_unmeasured_batch_interpolates_samples_between_curves(golden: Path) -> None:
    # imagenet at 512 lies between the 400 and 800 runs: samples needed (steps x batch) are
    # interpolated linearly in the batch.
    wl = load_trace(golden / "sia_small.csv")
    s400 = last_iteration(BUNDLED, "imagenet", 400) * 400
    s800 = last_iteration(BUNDLED, "imagenet", 800) * 800
    steps = (s400 + (512 - 400) / 400 * (s800 - s400)) / 512
    step, _sync = step_sync(BUNDLED, "imagenet", "azure", [4], 128)
    assert wl.jobs[1].duration_hint_s == pytest.approx(steps * step)


def test_sia_batch_outside_the_profiled_range_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n"
                    "ok-0,1,cifar10,4,2048\nx-1,2,cifar10,4,8192\n")
    with pytest.raises(TraceFormatError, match="8192 is outside the profiled range 128-4096") \
            as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (3, "batch_size")
    got = read_trace(path, on_error="skip")
    assert [j.job_id for j in got.workload.jobs] == ["ok-0"]
    assert [s.field for s in got.skipped] == ["batch_size"]


def test_sia_unknown_application(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\nx-0,1,gpt9,1,8\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (2, "application")
    with pytest.raises(TraceFormatError, match="no jobs after skipping 1"):
        read_trace(path, on_error="skip")


@pytest.mark.parametrize(
    ("row", "field"),
    [("x-0,1,cifar10,two,2048", "num_replicas"),
     ("x-0,1,cifar10,0,2048", "num_replicas"),
     ("x-0,-5,cifar10,4,2048", "time"),
     ("x-0,1,cifar10,4,big", "batch_size"),
     (",1,cifar10,4,2048", "name")],
    ids=["replicas-not-int", "zero-replicas", "negative-time", "batch-not-int", "no-name"],
)
def test_sia_malformed_rows_name_their_field(tmp_path: Path, row: str, field: str) -> None:
    path = tmp_path / "w.csv"
    path.write_text(f"name,time,application,num_replicas,batch_size\n{row}\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (2, field)


def test_sia_unmeasured_gang_size_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\nx-0,1,cifar10,100,4096\n")
    with pytest.raises(TraceFormatError, match="was never measured") as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (2, None)


def test_sia_named_sets(shared: Callable[[str], Path]) -> None:
    shared("sia_workloads/philly/workload-1.csv")
    assert len(load_trace("sia-philly-1")) == 160
    assert len(load_trace("sia-newtrace-10")) == 960
