"""Policies keep their caches in the driver's DecisionContext, not on themselves."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tessera.perf.profiles import default_throughputs
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext, PolicyCaches
from tessera.sched.core.decide import decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import Policy
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator
from tessera.workload.elastic import elastic_range
from tests.builders import make_cluster, make_job, make_workload, snapshot, view


def _shape(policy: Policy) -> dict[str, Any]:
    """What a policy object holds: attribute -> (type, size of a container)."""
    return {k: (type(v), len(v) if isinstance(v, dict | list | set) else None)
            for k, v in vars(policy).items()}


@pytest.mark.parametrize("name", ["hetero_srpt", "hetero_gittins", "hetero_pack",
                                  "max_min_fairness", "finish_time_fairness"])
def test_a_busy_run_leaves_the_policy_object_as_it_was_built(name: str) -> None:
    """40 jobs of 1-4 GPUs on 2 V100 + 2 K80 nodes of 4 GPUs (tests.builders.busy_simulator's
    run): gangs wait, are preempted, pair up -- and the policy object gains no state."""
    c = make_cluster().node("v100", gpus=4, count=2).node("k80", gpus=4, count=2).build()
    jobs = [make_job(f"j{i}", gpus=1 + i % 4, steps=2e4 + 5e3 * (i % 7), submit_s=40 * i)
            for i in range(40)]
    policy = make_policy(name)
    before = _shape(policy)
    Simulator(make_workload(*jobs), c, policy, SimConfig(), default_throughputs()).run()
    assert _shape(policy) == before


def test_pollux_keeps_its_rows_in_the_context() -> None:
    c = make_cluster().node("T4", gpus=4).node("A100-40GB", gpus=8).build()
    jobs = [view(make_job(jid, 1, job_type="cifar10 (batch size 129)",
                          elastic=elastic_range(m, 1, b)))
            for jid, m, b in (("a", "cifar10", 2048), ("b", "bert", 384))]
    policy = make_policy("pollux")
    before = _shape(policy)
    ctx = DecisionContext(ThroughputOracle(sia_throughputs(), c), random.Random(0))
    decide(snapshot(c, *jobs, now_s=600.0, round_s=60.0), policy, ctx)
    assert _shape(policy) == before
    assert len(ctx.caches) == 1


def test_one_table_per_policy_and_name_made_once() -> None:
    caches = PolicyCaches()
    a, b = make_policy("fifo"), make_policy("fifo")
    table = caches.get(a, "t", dict)
    table["k"] = 1
    assert caches.get(a, "t", dict) is table
    assert caches.get(b, "t", dict) == {}
    assert caches.get(a, "u", list) == []
    assert len(caches) == 3
