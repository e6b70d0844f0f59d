"""Gavel's packed mechanism in pieces: combination order, row layout, the LP, crediting."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.model.jobs import JobId
from tessera.sched.core.lp import LpSolver
from tessera.sched.gavel import Backend
from tessera.sched.gavel.packed import (
    PackedState,
    combos_of,
    credit_combos,
    gavel_sorted,
    reset_counters,
)
from tessera.sched.gavel.packed_lp import PackedProblem, job_rows, packed_max_min

J = [JobId(str(i)) for i in range(12)]


def test_combinations_follow_gavels_insertion_order() -> None:
    # A job, then its pairs with the earlier jobs of its gang size, jobs by numeric id.
    gang = {J[0]: 1, J[1]: 1, J[2]: 2, J[10]: 1}
    assert combos_of([J[10], J[2], J[1], J[0]], gang) == [
        (J[0],), (J[1],), (J[0], J[1]), (J[2],), (J[10],), (J[0], J[10]), (J[1], J[10])]


def test_gavel_sort_puts_jobs_first_then_pairs_lexicographically() -> None:
    combos = [(J[1], J[10]), (J[10],), (J[0], J[2]), (J[2],), (J[0], J[10])]
    assert gavel_sorted(combos) == [(J[2],), (J[10],), (J[0], J[2]), (J[0], J[10]),
                                    (J[1], J[10])]


def test_rows_are_jobs_when_every_job_has_as_many_combinations() -> None:
    rows, chunked = job_rows([(0, 2), (1, 2)], 2, gavel_form=True)
    assert chunked and [[(i, c) for i, c, _t in r] for r in rows] == [
        [(0, 0), (0, 0), (0, 2), (0, 2)], [(1, 1), (1, 1), (1, 2), (1, 2)]]


def test_rows_straddle_jobs_like_gavels_reshape_when_lengths_differ() -> None:
    # 3 + 1 + 2 = 6 terms (one type) in 3 rows of 2: Gavel's reshape mixes jobs 0 and 1.
    rows, chunked = job_rows([(0, 1, 2), (3,), (4, 5)], 1, gavel_form=True)
    assert chunked and [[i for i, _c, _t in r] for r in rows] == [[0, 0], [0, 1], [2, 2]]
    # When the length does not divide, Gavel crashes; we fall back to one row per job.
    rows, chunked = job_rows([(0, 1), (2,), (3, 4)], 1, gavel_form=True)
    assert not chunked and [len(r) for r in rows] == [2, 1, 2]


def _two_jobs(pair: tuple[float, float]) -> PackedProblem:
    # One GPU type with one GPU; jobs a (speed 2 alone) and b (speed 1 alone).
    return PackedProblem(
        jobs=(J[0], J[1]), combos=((J[0],), (J[1],), (J[0], J[1])),
        members=((0, 2), (1, 2)),
        member_speed=(np.array([[2.0], [pair[0]]]), np.array([[1.0], [pair[1]]])),
        scale=np.ones(3), weight=np.ones(2), isolated=np.array([[2.0], [1.0]]),
        capacity=np.array([1.0]),
    )


def test_packed_lp_runs_a_pair_that_beats_time_slicing() -> None:
    # Alone, max-min gives each job half the GPU: normalised rate 0.5. Paired at 1.6 and 0.8
    # steps/s, both run all the time at 0.8 of their speed: 0.8 > 0.5.
    x, notes = packed_max_min(_two_jobs((1.6, 0.8)), Backend(LpSolver(), "highs"))
    assert notes == () and x[2, 0] == pytest.approx(1.0)


def test_packed_lp_ignores_a_pair_that_does_not() -> None:
    x, _ = packed_max_min(_two_jobs((0.6, 0.3)), Backend(LpSolver(), "highs"))
    assert x[2, 0] == pytest.approx(0.0, abs=1e-9)
    assert x[0, 0] == pytest.approx(0.5) and x[1, 0] == pytest.approx(0.5)


def test_new_pairs_are_seeded_with_zero_and_credited_once() -> None:
    st = PackedState.initial()
    combos = [(J[0],), (J[1],), (J[0], J[1])]
    time_s, deficit, worker = st.arrays(combos, ["v100"], 180.0)
    assert time_s[:, 0].tolist() == [180.0, 180.0, 0.0] and worker.tolist() == [0.0]
    # A reset: deficits grow by owed minus received (seed removed), totals restart.
    shares = np.array([[0.0], [0.0], [1.0]])
    time_s, deficit, worker = reset_counters(time_s, deficit, shares, 100.0, 180.0)
    assert deficit[:, 0].tolist() == [0.0, 0.0, 280.0] and worker.tolist() == [540.0]
    st = PackedState(("v100",), {c: tuple(time_s[i]) for i, c in enumerate(combos)},
                     {c: tuple(deficit[i]) for i, c in enumerate(combos)}, tuple(worker),
                     None, 100.0, False)
    after = credit_combos(st, [((J[0], J[1]), "v100", 300.0)], event=True, drained=False)
    assert after.time_s[(J[0], J[1])] == (480.0,) and after.time_s[(J[0],)] == (180.0,)
    assert after.worker_time_s == (840.0,) and after.need_update
