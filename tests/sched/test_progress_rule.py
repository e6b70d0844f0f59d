"""One no-progress rule for both clocks (issue 31, part 3: one cadence).

:func:`tessera.sched.core.cadence.progressed_since` decides whether a round counts as progress
for the :class:`~tessera.sched.core.cadence.ProgressWatch`. The simulator's round driver and
the live service both call it rather than each writing the rule inline; what each clock feeds
it (its running jobs, its finished count) is its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tessera.sched.core.cadence import progressed_since

SRC = Path(__file__).resolve().parents[2] / "src" / "tessera"


@pytest.mark.parametrize(("held", "ended", "progressed"), [
    ([], False, True),                          # nobody holds GPUs: no thrashing
    ([(90.0, 1.0)], False, True),               # past its restore at a positive speed
    ([(100.0, 1.0)], False, False),             # restore ends only now
    ([(130.0, 1.0)], False, False),             # still restoring
    ([(0.0, 0.0)], False, False),               # launched, not started (speed 0)
    ([(130.0, 1.0), (50.0, 2.0)], False, True),  # one of several is enough
    ([(130.0, 1.0)], True, True),               # a job ended since the last round
])
def test_the_rule(held: list[tuple[float, float]], ended: bool, progressed: bool) -> None:
    assert progressed_since(iter(held), 100.0, ended=ended) is progressed


@pytest.mark.parametrize("module", ["sim/drivers/heap.py", "live/service.py"])
def test_both_clocks_call_the_one_rule(module: str) -> None:
    """Each clock calls :func:`progressed_since` and judges no run's progress itself (it never
    compares a run's ``progress_from_s`` with the clock)."""
    tree = ast.parse((SRC / module).read_text())
    calls = {n.func.id for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "progressed_since" in calls
    compares = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare)
                and "progress_from_s" in ast.unparse(n)]
    assert compares == []
