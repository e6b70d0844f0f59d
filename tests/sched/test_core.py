"""The decision round: placement outcomes, preemption, reasons, quotas, determinism."""

from __future__ import annotations

import random

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import PendingKind, PlacementOptions, decide
from tessera.sched.core.feasibility import Feasibility, infeasibility
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Placement, QueueQuota
from tests.builders import RECO, RESNET, make_cluster, make_job, snapshot, view

_K80 = resolve_flavor("K80")
_V100_16GB = resolve_flavor("V100-16GB")


def _run(cluster, *views, policy="fifo", **kw):  # type: ignore[no-untyped-def]
    oracle = ThroughputOracle(default_throughputs(), cluster)
    opts = kw.pop("options", None)
    return decide(snapshot(cluster, *views, **kw), make_policy(policy),
                  DecisionContext(oracle, random.Random(0)), opts)


def test_fifo_places_in_order_and_explains_the_rest() -> None:
    c = make_cluster().node("v100", gpus=2).build()
    a, b, d = make_job("a", 2), make_job("b", 1, submit_s=1), make_job("c", 1, submit_s=2)
    out = _run(c, view(a), view(b), view(d))
    assert set(out.placements) == {"a"}
    assert out.pending["b"].kind is PendingKind.CAPACITY
    assert "ranked #2" in str(out.pending["b"])


def test_aware_fifo_uses_the_fastest_flavor_first() -> None:
    c = make_cluster().node("k80", gpus=1).node("v100", gpus=1).build()
    out = _run(c, view(make_job("a")))
    assert out.placements["a"].flavor == _V100_16GB


def test_agnostic_fifo_ignores_speed() -> None:
    c = make_cluster().node("k80", gpus=1).node("v100", gpus=1).build()
    out = _run(c, view(make_job("a")), policy="fifo-agnostic")
    assert out.placements["a"].flavor == _K80  # cluster order, speed hidden


def test_job_flavor_preference_is_respected() -> None:
    c = make_cluster().node("k80", gpus=1).node("v100", gpus=1).build()
    out = _run(c, view(make_job("a", flavors=("k80",))))
    assert out.placements["a"].flavor == _K80


def test_non_preemptive_keeps_running_jobs() -> None:
    c = make_cluster().node("v100", gpus=1).build()
    running = view(make_job("old", steps=1e9), JobState.RUNNING,
                   Placement.of(_V100_16GB, (("v100-16gb-0000", 1),)))
    short = view(make_job("new", steps=10, submit_s=5))
    out = _run(c, running, short, policy="sjf")
    assert "old" in out.placements and not out.preempted


def test_preemptive_policy_displaces_a_long_job() -> None:
    c = make_cluster().node("v100", gpus=1).build()
    running = view(make_job("old", steps=1e9), JobState.RUNNING,
                   Placement.of(_V100_16GB, (("v100-16gb-0000", 1),)), remaining_steps=1e9)
    short = view(make_job("new", steps=10, submit_s=5))
    out = _run(c, running, short, policy="srtf")
    assert out.preempted == ("old",) and "new" in out.started


def test_running_job_keeps_its_gpus() -> None:
    c = make_cluster().node("v100", gpus=2).build()
    p = Placement.of(_V100_16GB, (("v100-16gb-0000", 1),))
    out = _run(c, view(make_job("a", steps=10), JobState.RUNNING, p, remaining_steps=10),
               view(make_job("b", steps=20, submit_s=1)), policy="srtf")
    assert out.placements["a"] == p and "a" not in out.started


def test_fragmentation_reason_with_locality() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    blockers = [
        view(make_job(f"r{i}"), JobState.RUNNING,
             Placement.of(_V100_16GB, ((f"v100-16gb-000{i}", 2),)))
        for i in range(2)
    ]
    big = view(make_job("big", 4, requires_locality=True, submit_s=1))
    out = _run(c, *blockers, big)
    r = out.pending["big"]
    assert r.kind is PendingKind.FRAGMENTATION
    assert "largest free block on one node is 2" in str(r)


def test_locality_wait_delays_splitting() -> None:
    c = make_cluster().node("v100", gpus=4, count=2).build()
    blockers = [
        view(make_job(f"r{i}", 2), JobState.RUNNING,
             Placement.of(_V100_16GB, ((f"v100-16gb-000{i}", 2),)))
        for i in range(2)
    ]
    job = view(make_job("a", 4, submit_s=1), pending_since_s=0.0)
    waiting = _run(c, *blockers, job, now_s=10.0, options=PlacementOptions(locality_wait_s=60))
    assert "a" not in waiting.placements
    assert waiting.pending["a"].kind is PendingKind.FRAGMENTATION
    relaxed = _run(c, *blockers, job, now_s=61.0, options=PlacementOptions(locality_wait_s=60))
    assert not relaxed.placements["a"].consolidated


def test_gang_larger_than_any_node_never_waits_for_locality() -> None:
    c = make_cluster().node("v100", gpus=2, count=2).build()
    job = view(make_job("a", 4), pending_since_s=0.0)
    out = _run(c, job, now_s=10.0, options=PlacementOptions(locality_wait_s=3600))
    assert not out.placements["a"].consolidated


def test_quota_holds_jobs_over_nominal_plus_borrowing() -> None:
    c = make_cluster().node("v100", gpus=8).build()
    q = {"team": QueueQuota("team", nominal_gpus=2, borrowing_limit_gpus=1)}
    jobs = [view(make_job(f"j{i}", 1, submit_s=i, queue="team")) for i in range(5)]
    out = _run(c, *jobs, quotas=q)
    assert len(out.placements) == 3
    reason = out.pending["j3"]
    assert reason.kind is PendingKind.QUOTA and "team" in str(reason)


@pytest.mark.parametrize(
    ("job", "match"),
    [(make_job("x", 9, requires_locality=True), "9 GPUs on one node"),
     (make_job("x", 64), "largest allowed flavor pool has 16"),
     (make_job("x", flavors=("a100",)), "accepts only A100-80GB"),
     (make_job("x", 2, job_type=RECO), "no throughput profile"),
     (make_job("x", job_type="Unknown (batch size 1)"), "no throughput profile")],
    ids=["locality", "too-big", "absent-flavor", "single-gpu-only-type", "unknown-type"],
)
def test_infeasible_jobs_are_explained(job, match: str) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster().node("v100", gpus=8, count=2).build()
    oracle = ThroughputOracle(default_throughputs(), c)
    reason = infeasibility(job, c, oracle)
    assert reason is not None and match in reason


def test_feasibility_answers_as_infeasibility_once_per_kind_of_job() -> None:
    c = make_cluster().node("v100", gpus=8, count=2).node("k80", gpus=4).build()
    oracle = ThroughputOracle(default_throughputs(), c)
    jobs = [make_job(f"x{i}", g, job_type=t, requires_locality=loc, flavors=fl)
            for i, (g, t, loc, fl) in enumerate(
                (g, t, loc, fl) for g in (1, 2, 9, 64) for t in (RESNET, RECO)
                for loc in (False, True) for fl in ((), ("k80",), ("a100",)))]
    for mixed in (False, True):
        check = Feasibility(c, oracle, mixed)
        for job in jobs + jobs:  # (the second pass is answered from what was worked out)
            assert check(job) == infeasibility(job, c, oracle, mixed), job


def test_missing_split_speed_drops_a_flavor_unless_gangs_always_run_consolidated() -> None:
    """ResNet-50 (bs 64) was measured as a 2-GPU gang on K80 consolidated only. Tessera's own
    simulation may have to split the gang (1-GPU servers here), so with no split speed K80
    cannot run it; Gavel compatibility (``split_large_gangs=False``) always runs the
    consolidated speed, so K80 stays runnable at 1.2636 steps/s."""
    c = make_cluster().node("k80", gpus=1, count=2).node("v100", gpus=1, count=2).build()
    job = make_job("x", 2, job_type="ResNet-50 (batch size 64)")
    table = default_throughputs()
    ours = ThroughputOracle(table, c)
    assert [r.flavor for r in ours.real_rates(job)] == [_V100_16GB]
    gavel = ThroughputOracle(table, c, split_large_gangs=False)
    k80 = {r.flavor: r for r in gavel.real_rates(job)}[_K80]
    assert k80.consolidated == k80.spread == table.throughput(job.job_type, _K80, 2)
    assert gavel.rate(job, _K80, True) == pytest.approx(1.2636370655757299)


def test_feasible_job_has_no_reason() -> None:
    c = make_cluster().node("v100", gpus=8).build()
    oracle = ThroughputOracle(default_throughputs(), c)
    assert infeasibility(make_job("x", 8, job_type=RESNET), c, oracle) is None


@pytest.mark.parametrize("policy", ["fifo", "sjf", "srtf", "las", "max_min_fairness",
                                    "finish_time_fairness", "min_makespan", "max_sum_throughput",
                                    "hetero_srpt", "max_min_fairness-agnostic", "las-agnostic"])
def test_every_policy_is_deterministic_and_never_over_allocates(policy: str) -> None:
    c = make_cluster().node("v100", gpus=4).node("p100", gpus=4).node("k80", gpus=4).build()
    rng = random.Random(1)
    views = [view(make_job(f"j{i}", rng.choice([1, 1, 2, 4]), steps=rng.uniform(1e3, 1e5),
                           submit_s=i)) for i in range(20)]
    a = _run(c, *views, policy=policy, now_s=100.0)
    b = _run(c, *views, policy=policy, now_s=100.0)
    assert a.placements == b.placements
    used: dict[str, int] = {}
    for p in a.placements.values():
        for node, k in p.gpus_by_node:
            used[node] = used.get(node, 0) + k
    cap = {n.node_id: n.gpus for n in c.nodes}
    assert all(used[n] <= cap[n] for n in used)
    assert set(a.pending) | set(a.placements) == {v.job_id for v in views}
    assert [name for name, _ms in a.phase_ms] == ["admit", "order", "place", "preempt",
                                                  "explain"]


def test_preemptive_policy_upgrades_to_a_faster_free_flavor_when_it_pays() -> None:
    c = make_cluster().node("k80", gpus=1).node("v100", gpus=1).build()
    on_k80 = Placement.of(_K80, (("k80-0000", 1),))
    long_job = view(make_job("a", steps=1e7), JobState.RUNNING, on_k80, remaining_steps=1e7)
    out = _run(c, long_job, policy="srtf")
    assert out.placements["a"].flavor == _V100_16GB and out.started == ("a",)
    nearly_done = view(make_job("b", steps=1e7), JobState.RUNNING, on_k80, remaining_steps=10)
    assert _run(c, nearly_done, policy="srtf").started == ()  # not worth a restart
    assert _run(c, long_job, policy="fifo").started == ()  # FIFO never moves anyone
    assert _run(c, long_job, policy="srtf-agnostic").started == ()  # blind to the speed-up


@pytest.mark.parametrize("policy", ["fifo", "hetero_srpt", "max_min_fairness", "hetero_pack"])
def test_rankings_placements_and_free_books_hold_catalog_flavors(policy: str) -> None:
    """Below the edge a flavor is the catalog's object, never a name: in a policy's ranking,
    the placements the core hands out, the free-GPU book, the rates and the pending reasons."""
    from tessera.model.gpus import CATALOG
    from tessera.sched.core.placement import FreeGpus
    from tessera.sched.core.policy import PolicyContext

    c = make_cluster().node("k80", gpus=2).node("v100", gpus=2).node("p100", gpus=1).build()
    views = [view(make_job(f"j{i}", 1 + i % 2, submit_s=float(i))) for i in range(6)]
    snap = snapshot(c, *views, round_s=360.0)
    oracle = ThroughputOracle(default_throughputs(), c)
    ranking = make_policy(policy).rank(PolicyContext(snap, oracle, random.Random(0)))
    assert ranking.candidates and all(fl in CATALOG for _j, fl in ranking.candidates)
    out = _run(c, *views, policy=policy, round_s=360.0)
    assert out.placements
    for p in out.placements.values():
        assert p.flavor in CATALOG and p.flavors == (p.flavor,) and p.label == p.flavor.short
    assert all(f in CATALOG for f in FreeGpus.of_snapshot(snap).flavors())
    assert all(r.flavor in CATALOG for v in views for r in oracle.rates(v.spec))
