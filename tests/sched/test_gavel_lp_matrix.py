"""The max-min LP's constraint matrix, written column by column, is the one that stacking its
blocks with scipy gives: the same compressed-column arrays, explicit zeros included, so the
solver sees the same model and returns the same shares."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tessera.sched.gavel.maxmin import max_min_rows
from tessera.sched.gavel.problem import ShareProblem, Variables, base_constraints


def _stacked(p: ShareProblem, a: np.ndarray, v: Variables) -> sp.csc_matrix:
    """The blocks stacked with scipy: base constraints, fairness rows, the ``z`` column."""
    base, _upper = base_constraints(p, v)
    live = v.jobs_with_columns()
    fair = v.per_job(-a, live)
    z_col = sp.vstack([sp.csr_matrix((base.shape[0], 1)),
                       sp.csr_matrix(np.ones((len(live), 1)))])
    return sp.hstack([sp.vstack([base, fair]), z_col]).tocsc()


@pytest.mark.parametrize("every_pair", [False, True])
def test_the_matrix_is_the_stacked_blocks(every_pair: bool) -> None:
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(200):
        m, j = int(rng.integers(1, 40)), int(rng.integers(1, 5))
        tput = rng.random((m, j)) * (rng.random((m, j)) > 0.4)  # rows of zeros too
        scale = rng.integers(0, 9, m).astype(float)  # a zero gang size: an explicit zero
        p = ShareProblem(tuple(range(m)), tuple("abcde"[:j]), tput, scale, np.ones(m),
                         np.full(j, 8.0))
        a = tput * rng.random((m, 1))
        v = Variables.every_pair(p) if every_pair else Variables.runnable(p)
        if len(v) == 0:
            continue
        got, live = max_min_rows(p, a, v)
        want = _stacked(p, a, v)
        assert got.shape == want.shape
        np.testing.assert_array_equal(live, v.jobs_with_columns())
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        checked += 1
    assert checked > 150
