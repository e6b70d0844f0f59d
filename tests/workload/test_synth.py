"""Gavel-like synthetic generator: seeded, and distributed as Gavel draws."""

from __future__ import annotations

import statistics
from collections import Counter
from itertools import pairwise

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.workload import generate_gavel_like


def test_same_seed_same_workload() -> None:
    a = generate_gavel_like(300, 20, seed=3)
    b = generate_gavel_like(300, 20, seed=3)
    c = generate_gavel_like(300, 20, seed=4)
    assert a.jobs == b.jobs
    assert a.jobs != c.jobs


def test_distributions_match_gavel() -> None:
    n = 20000
    wl = generate_gavel_like(n, jobs_per_hour=6, seed=11, multi_priority=True)
    table = default_throughputs()
    sizes = Counter(j.num_gpus for j in wl.jobs)
    for sf, p in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert sizes[sf] / n == pytest.approx(p, abs=0.015)
    gaps = [b.submit_time_s - a.submit_time_s for a, b in pairwise(wl.jobs)]
    assert statistics.fmean(gaps) == pytest.approx(600, rel=0.03)
    durations = [j.duration_hint_s or 0 for j in wl.jobs]
    assert min(durations) >= 60 * 10**1.5 and max(durations) <= 60 * 10**4
    long_share = sum(d > 60 * 10**3 for d in durations) / n
    assert long_share == pytest.approx(0.2, abs=0.015)
    high = sum(j.priority_weight == 5 for j in wl.jobs) / n
    assert high == pytest.approx(0.2, abs=0.015)
    multi = set(table.distributable_types())
    assert all(j.job_type in multi for j in wl.jobs if j.num_gpus > 1)
    assert len({j.job_type for j in wl.jobs if j.num_gpus == 1}) == len(table.job_types())
    for j in wl.jobs[:200]:
        tput = table.throughput(j.job_type, resolve_flavor("V100-16GB"), j.num_gpus)
        assert j.total_steps == max(1, round((j.duration_hint_s or 0) * tput))


def test_single_gpu_and_single_priority() -> None:
    wl = generate_gavel_like(500, 10, seed=1, multi_gpu=False)
    assert {j.num_gpus for j in wl.jobs} == {1}
    assert {j.priority_weight for j in wl.jobs} == {1.0}
    assert wl.jobs[0].submit_time_s == 0.0


@pytest.mark.parametrize(("n", "rate"), [(0, 1.0), (5, 0.0)], ids=["no jobs", "zero rate"])
def test_rejects_bad_arguments(n: int, rate: float) -> None:
    with pytest.raises(SpecError):
        generate_gavel_like(n, rate, seed=0)
