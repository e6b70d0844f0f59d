"""Round-based policies keep per-job inputs between rounds; their rankings equal a fresh
policy's at every decision of whole runs.

* Gavel's mechanism (``max_min_fairness``, ``finish_time_fairness``) keeps each job's share,
  time run at the reallocation and usable flavors until the next reallocation, the rows it
  gathered while the jobs stay the same, the flavor order and the shares' notes;
* ``hetero_srpt`` keeps each job's usable rates by job id (with its spec).

A fresh policy instance builds all of them from the snapshot; the kept ones must give the same
candidates, in the same order, round after round (preemptions, failures and retries included).
"""

from __future__ import annotations

import random

import pytest

from tessera.sched.catalog import make_policy
from tessera.sched.core.decide import Decision
from tessera.sched.core.policy import PolicyContext
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Snapshot
from tessera.sim.config import FailureConfig, SimConfig
from tests.builders import busy_simulator


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_min_fairness-agnostic",
                                    "finish_time_fairness", "hetero_srpt"])
def test_kept_inputs_rank_as_a_fresh_policy_at_every_decision(policy: str) -> None:
    cfg = SimConfig(scheduler=SchedulerSettings(mode="rounds"),
                    failures=FailureConfig(job_failure_rate=0.5, retry_delay_s=30.0))
    sim = busy_simulator(policy, cfg, k80_nodes=3)
    world = sim.world
    world_decide = world.decide
    checked = 0

    def decide(snap: Snapshot, opts: object = None) -> Decision:
        nonlocal checked
        seed = world.ctx.rng.getstate()
        answers = []
        for pol in (world.policy, make_policy(policy)):
            rng = random.Random()
            rng.setstate(seed)
            ranking = pol.rank(PolicyContext(snap, world.ctx.oracle, rng))
            answers.append((ranking.candidates, dict(ranking.notes)))
        assert answers[0] == answers[1]
        checked += 1
        return world_decide(snap, opts)  # type: ignore[arg-type]

    world.decide = decide  # type: ignore[method-assign]
    sim.run()
    assert checked > 10
