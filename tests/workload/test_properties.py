"""Invariants over generated workloads (hypothesis)."""

from __future__ import annotations

import tempfile
from itertools import pairwise
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.workload import generate_gavel_like, load_trace, write_gavel_tsv


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 60),
    rate=st.floats(0.5, 500),
    seed=st.integers(0, 2**32),
    multi_gpu=st.booleans(),
    multi_priority=st.booleans(),
)
def test_generated_workloads_are_valid_and_round_trip(
    n: int, rate: float, seed: int, multi_gpu: bool, multi_priority: bool
) -> None:
    wl = generate_gavel_like(n, rate, seed, multi_gpu, multi_priority)
    assert len(wl) == n
    assert all(a.submit_time_s <= b.submit_time_s for a, b in pairwise(wl.jobs))
    assert wl.jobs == generate_gavel_like(n, rate, seed, multi_gpu, multi_priority).jobs
    with tempfile.TemporaryDirectory() as d:
        back = load_trace(write_gavel_tsv(wl, Path(d) / "w.trace"))
    assert [(j.job_type, j.num_gpus, j.total_steps, j.submit_time_s, j.priority_weight)
            for j in back.jobs] == [
        (j.job_type, j.num_gpus, j.total_steps, j.submit_time_s, j.priority_weight)
        for j in wl.jobs
    ]
