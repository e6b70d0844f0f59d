"""Cohort trees (issue 32 part 2): borrowing and lending through the tree within its limits
(Kueue's arithmetic), and reclaim of lent quota by preemption."""

from __future__ import annotations

from tessera.sched.core.decide import PendingKind
from tessera.sched.core.quota_book import QuotaBook
from tessera.sched.core.quotas import (
    Cohort,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    ReclaimWithinCohort,
)
from tessera.sched.core.tenancy import Tenancy
from tests.sched.quota_world import V100, cluster, job, pending, run, running

ANY = QueuePreemption(reclaim_within_cohort=ReclaimWithinCohort.ANY)


def _q(name: str, nominal: int, cohort: str | None, borrow: int | None = None,
       lend: int | None = None, **kw: object) -> QueueQuota:
    return QueueQuota.per_flavor(name, {V100: FlavorQuota(nominal, borrow, lend)},
                                 cohort=cohort, **kw)  # type: ignore[arg-type]


def _tree(*queues: QueueQuota, cohorts: tuple[Cohort, ...] = (Cohort("root"),)) -> Tenancy:
    return Tenancy(queues={q.name: q for q in queues}, cohorts={c.name: c for c in cohorts})


def test_borrowing_reaches_up_a_two_level_tree() -> None:
    # a and b sit in team cohort "t" under "root", which also holds x: a borrows from both.
    t = _tree(_q("a", 2, "t"), _q("b", 2, "t"), _q("x", 4, "root"),
              cohorts=(Cohort("root"), Cohort("t", "root")))
    book = QuotaBook(t)
    assert book.available("a", V100) == 8
    out = run(cluster(gpus=16), t, pending(job("j", 8, "a")))
    assert "j" in out.placements


def test_a_cohort_borrowing_limit_bounds_its_subtree() -> None:
    # Team "t" may take at most 1 GPU beyond its members' quota from the root.
    t = _tree(_q("a", 2, "t"), _q("b", 2, "t"), _q("x", 4, "root"),
              cohorts=(Cohort("root"), Cohort("t", "root", flavors={V100: FlavorQuota(0, 1)})))
    assert QuotaBook(t).available("a", V100) == 5
    out = run(cluster(gpus=16), t, pending(job("j", 6, "a")))
    assert out.pending["j"].kind is PendingKind.QUOTA


def test_lending_limits_keep_quota_home() -> None:
    # b lends nothing, x lends 1: a may use its 2 plus 1.
    t = _tree(_q("a", 2, "root"), _q("b", 2, "root", lend=0), _q("x", 4, "root", lend=1))
    book = QuotaBook(t)
    assert book.available("a", V100) == 3
    assert book.available("b", V100) == 5  # its own 2, a's 2 and x's 1
    book.charge("a", V100, 3)
    assert book.available("b", V100) == 2 and book.available("x", V100) == 3


def test_a_queue_borrowing_limit_and_no_cohort() -> None:
    t = _tree(_q("a", 2, "root", borrow=1), _q("b", 6, "root"), _q("solo", 2, None))
    book = QuotaBook(t)
    assert book.available("a", V100) == 3
    assert book.available("solo", V100) == 2  # no cohort: borrows nothing


def _two_two_eight(c_prio: tuple[int, int] = (0, 0)) -> tuple[Tenancy, list]:  # type: ignore[type-arg]
    """Kueue #10131's tree: teams a/b/c with 2/2/8 GPUs; c borrows a's and b's 4."""
    t = _tree(_q("a", 2, "root", preemption=ANY), _q("b", 2, "root", preemption=ANY),
              _q("c", 8, "root", preemption=ANY))
    jobs = [running(job("c-big", 8, "c"), V100, 0.0, node="v100-16gb-0000"),
            running(job("c-old", 2, "c", priority=c_prio[0]), V100, 10.0,
                    node="v100-16gb-0001"),
            running(job("c-new", 2, "c", priority=c_prio[1]), V100, 20.0,
                    node="v100-16gb-0001")]
    return t, jobs


def test_reclaim_frees_exactly_what_is_needed_most_recent_first() -> None:
    t, jobs = _two_two_eight()
    out = run(cluster(2, 0), t, *jobs, pending(job("a1", 2, "a", 30.0)), now_s=40.0)
    assert out.preempted == ("c-new",)
    assert "a1" in out.started


def test_reclaim_takes_the_lowest_priority_first() -> None:
    t, jobs = _two_two_eight(c_prio=(-1, 0))
    out = run(cluster(2, 0), t, *jobs, pending(job("a1", 2, "a", 30.0)), now_s=40.0)
    assert out.preempted == ("c-old",)


def test_reclaim_never_takes_from_a_queue_within_its_quota() -> None:
    t = _tree(_q("a", 2, "root", preemption=ANY), _q("c", 8, "root"))
    jobs = [running(job("c1", 8, "c"), V100), pending(job("a1", 4, "a", 1.0))]
    out = run(cluster(1, 0, gpus=10), t, *jobs, now_s=5.0)
    assert out.preempted == () and out.pending["a1"].kind is PendingKind.QUOTA


def test_without_a_reclaim_rule_nothing_is_preempted() -> None:
    t = _tree(_q("a", 2, "root"), _q("b", 2, "root"), _q("c", 8, "root"))
    _unused, jobs = _two_two_eight()
    out = run(cluster(2, 0), t, *jobs, pending(job("a1", 2, "a", 30.0)), now_s=40.0)
    assert out.preempted == () and "a1" not in out.placements
