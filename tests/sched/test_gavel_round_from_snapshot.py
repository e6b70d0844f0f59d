"""Gavel's policies seed each job with half of the run's round, read from the snapshot.

Before issue 31 ``GavelCompatConfig.round_s`` (360 s) seeded ``fifo_packed``, ``gandiva``
and the ``--compat gavel`` twins even when the run decided every 60 s: a second source of the
round length. Now the snapshot's ``round_s`` (``--round-s``, or Gavel's 360 s under
``--compat gavel``) is the only one.
"""

from __future__ import annotations

import random

import pytest

from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import PolicyContext
from tessera.sched.gavel import GavelState
from tessera.sched.gavel.compat import gavel_compat_policy
from tessera.sched.gavel.packed import PackedState
from tests.builders import make_cluster, make_job, snapshot, view


@pytest.mark.parametrize("round_s", [60.0, 360.0])
@pytest.mark.parametrize("policy", ["fifo_packed", "gandiva", "max_min_fairness_packed",
                                    "compat:max_min_fairness"])
def test_seeds_are_half_the_snapshot_round(policy: str, round_s: float) -> None:
    cluster = make_cluster().node("v100", gpus=2).build()
    pol = (gavel_compat_policy(make_policy(policy.split(":")[1]), 0, "highs")
           if policy.startswith("compat:") else make_policy(policy))
    snap = snapshot(cluster, view(make_job("a")), view(make_job("b")), now_s=0.0,
                    round_s=round_s)
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), cluster), random.Random(0))
    st = pol.rank(PolicyContext(snap, ctx.oracle, ctx.rng, ctx.solver)).state
    if isinstance(st, PackedState):
        seeds = {t for times in st.time_s.values() for t in times}
    else:
        assert isinstance(st, GavelState)
        seeds = {t for acc in st.accounts.values() for t in acc.time_s}
    assert seeds == {round_s / 2}
