"""The running-jobs mapping keeps the GPUs its jobs ask for through every supported change."""

from __future__ import annotations

import pytest

from tessera.sim.running import RunningJobs
from tessera.sim.state import SimJob
from tests.builders import make_job


def _job(idx: int, gpus: int) -> SimJob:
    return SimJob(make_job(f"j{idx}", gpus=gpus), idx, 0)


def test_gpus_follow_assignment_replacement_pop_del_and_clear() -> None:
    running = RunningJobs()
    a, b, c = _job(0, 4), _job(1, 2), _job(2, 1)
    running[0], running[1], running[2] = a, b, c
    assert running.gpus == 7
    running[1] = _job(1, 3)  # (the same index again: the old job's GPUs leave)
    assert running.gpus == 8
    assert running.pop(0, None) is a and running.gpus == 4
    assert running.pop(0, None) is None and running.gpus == 4
    del running[2]
    assert running.gpus == 3
    running.clear()
    assert running.gpus == 0 and not running


def test_changes_that_would_bypass_the_count_are_refused() -> None:
    running = RunningJobs()
    with pytest.raises(TypeError):
        running.update({0: _job(0, 1)})
    with pytest.raises(TypeError):
        running.setdefault(0, _job(0, 1))
    assert running.gpus == 0
