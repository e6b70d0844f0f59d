"""Sia workload jobs last as long as Sia's own model says: the steps their validation curve
needs at their batch, at the measured step time on their GPU count (rigid, alone, on V100).

Compared per model, on a sample of real workload rows, with a hand computation straight from the
public CSVs (tests/sia_hand.py), not from the bundled copy the reader uses.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from tessera.workload import load_trace
from tests.sia_hand import SHARED, rigid_duration_s, rows

MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")


@pytest.fixture
def profiles() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"public Sia profiles not present: {SHARED}")
    return SHARED


def test_every_model_matches_sias_rigid_model(
    shared: Callable[[str], Path], profiles: Path
) -> None:
    path = shared("sia_workloads/philly/workload-2.csv")
    with path.open(newline="") as f:
        table = list(csv.DictReader(f))
    jobs = {j.job_id: j for j in load_trace(path).jobs}
    checked = {m: 0 for m in MODELS}
    seen: set[tuple[str, str, str]] = set()
    for row in table:
        app, n, b = row["application"], row["num_replicas"], row["batch_size"]
        if (app, n, b) in seen:
            continue
        seen.add((app, n, b))
        expected = rigid_duration_s(profiles, app, int(n), int(b))
        assert jobs[row["name"]].duration_hint_s == pytest.approx(expected, rel=1e-9), row
        checked[app] += 1
    assert all(checked.values()), checked  # every model sampled at least once
    assert sum(checked.values()) >= 10


def test_sia_jobs_are_elastic_with_one_target_in_reference_batch_samples(
    profiles: Path, tmp_path: Path
) -> None:
    # The same cifar10 job at 2048 and at 4096: one statistical target, the progress of the
    # reference (smallest-batch) run's last epoch x that batch; GPUs from 1 up to the most that
    # each get the smallest measured local batch of the largest profiled batch.
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n"
                    "a-0,0,cifar10,8,2048\nb-1,0,cifar10,8,4096\n")
    a, b = load_trace(path).jobs
    target = float(rows(profiles / "cifar10" / "validation-128.csv")[-1]["progress"]) * 128
    smallest = min(int(r["local_bsz"]) for f in (profiles / "cifar10").glob("placements-*.csv")
                   for r in rows(f))
    for job, batch in ((a, 2048), (b, 4096)):
        assert job.elastic is not None
        assert job.elastic.target_samples == pytest.approx(target)
        assert (job.elastic.initial_batch_samples, job.elastic.max_batch_samples) == (batch, 4096)
        assert (job.elastic.min_gpus, job.elastic.max_gpus) == (1, 4096 // smallest)
        assert job.num_gpus == 8  # rigid policies still see the requested count
    assert b.duration_hint_s is not None and a.duration_hint_s is not None
    assert b.duration_hint_s == pytest.approx(rigid_duration_s(profiles, "cifar10", 8, 4096))
