"""A shared :class:`~tessera.sched.core.lp.LpSolver` that solved a QP solves the next LP as an
LP (``max_min_fairness:settle=ridge`` shares its decision context's solver with every other
LP of the round and the next rounds).

``set_hessian`` adds ``½ xᵀ Q x`` to the *loaded* model; :meth:`LpSolver.load` clears the
model (HiGHS ``clearModel``), so the next model has no Hessian. The problem below tells the
two apart: ``min −x − y`` over ``x + y ≤ 10`` has its LP optimum at a vertex (one variable at
10), the QP with ``Q = I`` at ``x = y = 1``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tessera.sched.core.lp import INF, LpModel, LpSolver


def _model(maximize: bool = False) -> LpModel:
    sign = 1.0 if maximize else -1.0
    return LpModel(np.array([sign, sign]), sp.csc_matrix(np.array([[1.0, 1.0]])),
                   np.array([-INF]), np.array([10.0]), np.zeros(2), np.full(2, 10.0),
                   maximize=maximize)


def test_a_hessian_does_not_outlive_its_model() -> None:
    lp = LpSolver()
    lp.load(_model())
    lp.set_hessian(sp.identity(2, format="csc"), 100)
    qp = lp.run()
    assert qp.x == pytest.approx([1.0, 1.0], abs=1e-6)  # (the QP did run as a QP)
    fresh = LpSolver().solve(_model())
    for again in (lp.solve(_model()), lp.solve(_model(maximize=True))):
        assert again == pytest.approx(fresh)
        assert again.sum() == pytest.approx(10.0)  # a vertex of the LP, not the QP's (1, 1)
