"""Job specs, workloads and the lifecycle table."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError, UnknownFlavorError
from tessera.model.jobs import (
    VALID_TRANSITIONS,
    InvalidTransition,
    JobState,
    transition,
)
from tests.builders import make_job, make_workload

EDGES = [(a, b) for a, targets in VALID_TRANSITIONS.items() for b in sorted(targets)]
NON_EDGES = [(a, b) for a in JobState for b in JobState if b not in VALID_TRANSITIONS[a]]


@pytest.mark.parametrize(("a", "b"), EDGES, ids=[f"{a}->{b}" for a, b in EDGES])
def test_every_valid_edge(a: JobState, b: JobState) -> None:
    assert transition(a, b) is b


@pytest.mark.parametrize(("a", "b"), NON_EDGES, ids=[f"{a}-x-{b}" for a, b in NON_EDGES])
def test_every_invalid_edge_is_refused(a: JobState, b: JobState) -> None:
    with pytest.raises(InvalidTransition):
        transition(a, b)


def test_final_states_have_no_exit() -> None:
    assert not VALID_TRANSITIONS[JobState.SUCCEEDED]
    assert not VALID_TRANSITIONS[JobState.CANCELLED]


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"gpus": 0}, "num_gpus"), ({"steps": 0}, "total_steps"), ({"submit_s": -1}, "negative"),
     ({"priority_weight": 0}, "priority_weight"), ({"max_retries": -1}, "max_retries"),
     ({"memory_gib": 0.0}, "memory_gib must be a positive number of GiB"),
     ({"batch_size": 0}, "batch_size must be >= 1"),
     ({"gpu_milli": 1000}, "gpu_milli must be 1-999 on a 1-GPU job"),
     ({"gpu_milli": 500, "gpus": 2}, "gpu_milli must be 1-999 on a 1-GPU job, got 500 on 2")],
)
def test_bad_job_specs(kw: dict[str, float], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        make_job("x", **kw)  # type: ignore[arg-type]


def test_workload_rejects_duplicates_disorder_and_empty() -> None:
    with pytest.raises(SpecError, match="duplicate"):
        make_workload(make_job("a"), make_job("a", submit_s=1))
    with pytest.raises(SpecError, match="submission order"):
        make_workload(make_job("a", submit_s=5), make_job("b", submit_s=1))
    with pytest.raises(SpecError, match="no jobs"):
        make_workload()


def test_job_flavors_are_resolved_once_at_construction() -> None:
    """Names become catalog flavors in the spec; an unknown name fails there, not in the core."""
    job = make_job("x", flavors=("a100", "V100"))
    assert [f.short for f in job.flavors] == ["A100-80GB", "V100-16GB"]
    with pytest.raises(UnknownFlavorError, match="unknown GPU flavor 'V999'"):
        make_job("y", flavors=("V999",))
