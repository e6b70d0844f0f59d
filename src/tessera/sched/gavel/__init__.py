"""Gavel's allocation maths, once (Narayanan et al., OSDI'20, "Heterogeneity-Aware Cluster
Scheduling Policies for Deep Learning Workloads").

Gavel's idea: write a scheduling policy as an optimisation over a jobs × flavors matrix of time
shares ``X``, then let a round-based mechanism turn shares into whole-gang turns. The pieces,
one module each:

* :mod:`.problem` -- the matrix, which pairs are variables, the base constraints;
* :mod:`.maxmin` -- the max-min LP (max-min fairness / LAS, makespan);
* :mod:`.maxsum` -- the max-sum-throughput LP (Gavel's ``max_sum_throughput_perf``);
* :mod:`.rho` -- the finish-time-fairness (Themis ρ) search;
* :mod:`.mechanism` -- priorities from shares vs. time received, and the per-flavor lists;
* :mod:`.state` -- Gavel's own bookkeeping between rounds (``--compat gavel``);
* :mod:`.solver` -- which optimiser (HiGHS simplex, HiGHS IPM, ECOS) and the fallback record.

Tessera's policies (``sched/gavel/lp_policy.py``) and the ``--compat gavel`` twins
(``sched/gavel/compat.py``) are thin users of this package; the LP solver always comes
from the caller (``PolicyContext.solver``), never from a module global.
"""

from tessera.sched.gavel.maxmin import max_min_shares
from tessera.sched.gavel.maxsum import max_sum_shares
from tessera.sched.gavel.mechanism import RoundState, Shares, priorities, ranked_entries
from tessera.sched.gavel.problem import ShareProblem, Variables, base_constraints
from tessera.sched.gavel.rho import RhoInputs, RhoSearch, min_max_rho
from tessera.sched.gavel.solver import Backend, Solved, SolverName, resolve_solver
from tessera.sched.gavel.state import (
    AlloxMemory,
    FifoMemory,
    FtfMemory,
    GavelState,
    JobAccount,
    credit_round,
)

__all__ = [
    "AlloxMemory",
    "Backend",
    "FifoMemory",
    "FtfMemory",
    "GavelState",
    "JobAccount",
    "RhoInputs",
    "RhoSearch",
    "RoundState",
    "ShareProblem",
    "Shares",
    "Solved",
    "SolverName",
    "Variables",
    "base_constraints",
    "credit_round",
    "max_min_shares",
    "max_sum_shares",
    "min_max_rho",
    "priorities",
    "ranked_entries",
    "resolve_solver",
]
