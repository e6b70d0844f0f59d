"""No policy livelocks, whatever the round length and the swap's cost (issue 31).

Before the lease rule (:func:`tessera.sched.core.cadence.leased`) Gavel's round policies never
finished with ``--round-s 60`` and the default costs (checkpoint 30 s + restore 30 s): a job
swapped in for a round spent it restoring, made no progress, and was swapped out again.

**The bound.** Write ``d_j`` for job ``j``'s work at its slowest speed (its steps over the
lowest rate of any flavor it may use, or half the pair rate if the policy packs), ``c`` for the
swap's cost (checkpoint + restore) and ``r`` for the round. Every job is done by

    T = last submission + Σ_j (2·d_j + c + r) + r  (+ n · 1920 s for Gavel's mechanism twins)

because (1) under the lease rule a run stopped by the scheduler progressed at least ``c``, at
least what it paid to start (``c``), so a job holds GPUs at most ``2·d_j + c`` in all, its
last run included; (2) a completion leaves its GPUs idle until the next round, at most ``r``
per job, and an arrival to an idle cluster waits at most one round; (3) while a job is active
some job holds GPUs (every policy here places a waiting job when GPUs are free), so the
spells of (1) and (2) cover the time after the last submission even one job at a time --
except in Gavel's mechanism twins (``fifo_packed``, ``max_min_fairness_packed``, ``gandiva``),
which leave a job that arrived after their last reallocation without a share until the next
one, at most ``reset_interval_s`` (Gavel's 1,920 s) per job. The
simulation runs with this horizon: a livelock shows as unfinished jobs, or as the simulator's
no-progress error, never as a test that hangs.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobSpec
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import gavel_loop_only, list_policies, make_policy
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import RESNET, make_cluster, make_job, make_workload

POLICIES = [name for name, _summary in list_policies()]
T = default_throughputs()
V100 = T.throughput(RESNET, resolve_flavor("v100"))
LM = "LM (batch size 20)"


def _cluster() -> ClusterSpec:
    """Two GPUs of each of two flavors: small enough that rounds rotate jobs."""
    return make_cluster().node("v100", gpus=2).node("k80", gpus=2).build()


def _bound_s(jobs: list[JobSpec], cluster: ClusterSpec, policy: str, swap_s: float,
             round_s: float) -> float:
    """``T`` of the module docstring."""
    oracle = ThroughputOracle(T, cluster)
    packs = make_policy(policy).packs
    total = 0.0
    for j in jobs:
        slowest = min(r.consolidated for r in oracle.real_rates(j))
        d = j.total_steps / (slowest / 2 if packs else slowest)
        total += 2 * d + swap_s + round_s
    # Gavel's mechanism twins give a job that arrived after their last reallocation no share
    # (its GPUs idle) until the next one: at most one reset interval per job.
    reset_s = getattr(make_policy(policy).config, "reset_interval_s", 0.0)
    return max(j.submit_time_s for j in jobs) + total + round_s + len(jobs) * reset_s


def _run(jobs: list[JobSpec], policy: str, round_s: float, checkpoint_s: float,
         restore_s: float) -> None:
    """Simulate ``jobs`` under ``policy`` up to the bound; Gavel's own policies run in Gavel's
    loop (``compat="gavel"``: its 360 s rounds, swaps free)."""
    cluster = _cluster()
    sched = SchedulerSettings(round_s=round_s, checkpoint_s=checkpoint_s, restore_s=restore_s)
    compat = "gavel" if gavel_loop_only(make_policy(policy), shares_gpus=True) else None
    cfg = SimConfig(scheduler=sched, compat=compat).effective()
    eff = cfg.scheduler
    horizon = _bound_s(jobs, cluster, policy, eff.migration_cost_s, eff.round_s)
    r = simulate(make_workload(*jobs), cluster, policy,
                 cfg.model_copy(update={"max_sim_time_s": horizon}))
    late = [j.job_id for j in r.jobs if j.finish_s is None or j.finish_s > horizon]
    assert not late, f"{policy}: {late} not done by the bound {horizon:.0f} s"
    assert r.summary.succeeded == len(jobs)


def _jobs(sizes: list[int], gaps_s: list[float], minutes: list[int]) -> list[JobSpec]:
    out = []
    t = 0.0
    for i, g in enumerate(sizes):
        t += gaps_s[i]
        kind = RESNET if i % 3 else LM
        rate = T.throughput(kind, resolve_flavor("v100"))
        out.append(make_job(f"j{i}", g, steps=rate * 60 * minutes[i], submit_s=t,
                            job_type=kind))
    return out


#: The issue's setting: a round as long as the swap's cost (60 s = 30 s + 30 s).
BUSY = _jobs([1, 1, 2, 1, 1, 2, 1], [0, 0, 30, 0, 200, 0, 10], [30, 20, 45, 15, 25, 40, 10])


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_finishes_with_a_round_as_long_as_the_swap(policy: str) -> None:
    _run(BUSY, policy, round_s=60.0, checkpoint_s=30.0, restore_s=30.0)


@pytest.mark.parametrize("policy", ["max_sum_throughput", "max_min_fairness"])
def test_a_round_shorter_than_the_swap_still_finishes(policy: str) -> None:
    _run(BUSY, policy, round_s=20.0, checkpoint_s=60.0, restore_s=60.0)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(POLICIES),
    sizes=st.lists(st.sampled_from([1, 1, 2]), min_size=1, max_size=7),
    gaps=st.lists(st.floats(0, 900), min_size=7, max_size=7),
    minutes=st.lists(st.integers(1, 60), min_size=7, max_size=7),
    round_s=st.sampled_from([5.0, 20.0, 30.0, 60.0, 90.0, 360.0]),
    checkpoint_s=st.sampled_from([0.0, 10.0, 30.0, 60.0]),
    restore_s=st.sampled_from([0.0, 10.0, 30.0, 90.0]),
)
def test_property_every_policy_finishes_within_the_bound(
    policy: str, sizes: list[int], gaps: list[float], minutes: list[int], round_s: float,
    checkpoint_s: float, restore_s: float,
) -> None:
    _run(_jobs(sizes, gaps, minutes), policy, round_s, checkpoint_s, restore_s)


def test_without_the_lease_the_simulator_names_the_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The no-progress net: with the lease rule switched off the issue's setting thrashes,
    and the round driver stops with one line naming ``--round-s`` and the swap's cost."""
    import tessera.sched.core.decide as core

    monkeypatch.setattr(core, "leased", lambda *_a, **_k: frozenset())
    jobs = _jobs([1] * 6, [0.0] * 6, [30] * 6)
    cluster = make_cluster().node("v100", gpus=2).build()
    sched = SchedulerSettings(round_s=60.0, checkpoint_s=30.0, restore_s=30.0)
    with pytest.raises(SpecError, match=r"--round-s 60 s is not longer than checkpoint \+ "
                                        r"restore \(60 s\)") as err:
        simulate(make_workload(*jobs), cluster, "max_min_fairness",
                 SimConfig(scheduler=sched, max_sim_time_s=10 * 86400.0))
    assert "\n" not in str(err.value)
