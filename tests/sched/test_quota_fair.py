"""Fair sharing (issue 32 part 3): borrowing goes to the lowest weighted dominant resource
share first; Kueue's two preemption strategies; admission by decayed usage history; weight 0
only borrows idle capacity."""

from __future__ import annotations

from tessera.sched.core.quotas import (
    Cohort,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    ReclaimWithinCohort,
)
from tessera.sched.core.tenancy import FairPreemption, FairSharing, Tenancy
from tests.sched.quota_world import V100, cluster, context, job, pending, run, running

ANY = QueuePreemption(reclaim_within_cohort=ReclaimWithinCohort.ANY)


def _q(name: str, nominal: int, weight: float = 1.0, **kw: object) -> QueueQuota:
    return QueueQuota.per_flavor(name, {V100: FlavorQuota(nominal)}, cohort="root",
                                 weight=weight, **kw)  # type: ignore[arg-type]


def _t(*queues: QueueQuota, fair: FairSharing = FairSharing(enabled=True)) -> Tenancy:
    return Tenancy(queues={q.name: q for q in queues}, cohorts={"root": Cohort("root")},
                   fair_sharing=fair)


def _borrowers(weight_b: float, fair: bool = True) -> list[str]:
    # L lends 6; a and b each already borrow 2; 2 GPUs of quota are left for one of them.
    t = _t(_q("lender", 6), _q("a", 0), _q("b", 0, weight_b),
           fair=FairSharing(enabled=fair))
    out = run(cluster(1, 0), t, running(job("ra", 2, "a"), V100), running(job("rb", 2, "b"), V100),
              pending(job("a2", 2, "a", 1.0)), pending(job("b2", 2, "b", 2.0)), now_s=3.0)
    return sorted(out.started)


def test_borrowing_goes_to_the_lowest_weighted_share() -> None:
    assert _borrowers(weight_b=1.0) == ["a2"]  # equal shares: the policy's order
    assert _borrowers(weight_b=2.0) == ["b2"]  # b's share is halved by its weight
    assert _borrowers(weight_b=2.0, fair=False) == ["a2"]


def test_weight_zero_only_borrows_idle_capacity() -> None:
    t = _t(_q("lender", 2), _q("z", 0, 0.0), _q("a", 0))
    out = run(cluster(1, 0), t, pending(job("z1", 2, "z", 0.0)), pending(job("a1", 2, "a", 1.0)))
    assert out.started == ("a1",)  # z was first in line, but borrowing is a's
    alone = run(cluster(1, 0), t, pending(job("z1", 2, "z", 0.0)))
    assert alone.started == ("z1",)  # nobody else wants it: z may borrow it


def _strategy_case(strategies: tuple[FairPreemption, ...]) -> tuple[str, ...]:
    # a borrows 2 (share 250), b borrows 6 in one gang (share 750); a asks 2 more (share 500).
    t = _t(_q("lender", 8), _q("a", 0, preemption=ANY), _q("b", 0),
           fair=FairSharing(enabled=True, strategies=strategies))
    out = run(cluster(1, 0), t, running(job("ra", 2, "a"), V100, 0.0),
              running(job("rb", 6, "b"), V100, 0.0), pending(job("a2", 2, "a", 1.0)), now_s=2.0)
    return out.preempted


def test_less_than_or_equal_to_final_share_refuses_to_overshoot() -> None:
    # After the preemption b's share would be 0 < a's 500: refused.
    assert _strategy_case((FairPreemption.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,)) == ()


def test_less_than_initial_share_compares_with_the_share_before() -> None:
    # a's 500 is below b's 750 before the preemption: allowed.
    assert _strategy_case((FairPreemption.LESS_THAN_INITIAL_SHARE,)) == ("rb",)
    both = (FairPreemption.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
            FairPreemption.LESS_THAN_INITIAL_SHARE)
    assert _strategy_case(both) == ("rb",)


def test_fair_preemption_stops_where_shares_meet() -> None:
    # b borrows 8 in four gangs; a asks for three 2-GPU jobs: two preemptions level the shares.
    t = _t(_q("lender", 8), _q("a", 0, preemption=ANY), _q("b", 0))
    jobs = [running(job(f"b{i}", 2, "b"), V100, float(i)) for i in range(4)]
    jobs += [pending(job(f"a{i}", 2, "a", 10.0 + i)) for i in range(3)]
    out = run(cluster(1, 0), t, *jobs, now_s=20.0)
    assert out.preempted == ("b3", "b2") and sorted(out.started) == ["a0", "a1"]


def test_admission_follows_decayed_usage_history() -> None:
    fair = FairSharing(enabled=False, usage_half_life_s=3600.0)
    t = _t(_q("lender", 2), _q("a", 0), _q("b", 0), fair=fair)
    c = cluster(1, 0)
    ctx = context(c)
    run(c, t, running(job("old", 2, "a"), V100), ctx=ctx)  # a used 2 GPUs at t=0
    out = run(c, t, pending(job("a2", 2, "a", 3000.0)), pending(job("b2", 2, "b", 3100.0)),
              now_s=3600.0, ctx=ctx)
    assert ctx.usage.usage("a") > 0 == ctx.usage.usage("b")
    assert out.started == ("b2",)
    fresh = run(c, t, pending(job("a2", 2, "a", 3000.0)), pending(job("b2", 2, "b", 3100.0)),
                now_s=3600.0)
    assert fresh.started == ("a2",)  # no history: the policy's order
