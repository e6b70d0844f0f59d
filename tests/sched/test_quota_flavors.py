"""Per-flavor quotas (issue 32 part 1): a job of a per-flavor queue runs on a flavor only
within that flavor's quota, checked where placement takes the GPUs; ``explain`` names the
flavor quota that holds it; one-number quotas keep their meaning."""

from __future__ import annotations

from tessera.sched.core.decide import PendingKind
from tessera.sched.core.quotas import Cohort, FlavorQuota, QueueQuota
from tessera.sched.core.snapshot import Snapshot
from tessera.sched.core.tenancy import Tenancy
from tests.sched.quota_world import P100, V100, cluster, job, pending, run, running


def _one(q: QueueQuota, *more: QueueQuota, cohorts: dict[str, Cohort] | None = None) -> Tenancy:
    return Tenancy(queues={x.name: x for x in (q, *more)}, cohorts=cohorts or {})


def test_a_flavor_quota_binds_at_placement() -> None:
    # 4 V100 + 8 P100 quota; fifo ranks V100 first (faster): the first job takes V100, the
    # second no longer fits V100's quota and goes to P100 -- today it would take V100 too.
    t = _one(QueueQuota.per_flavor("a", {V100: FlavorQuota(4, 0), P100: FlavorQuota(8, 0)}))
    out = run(cluster(), t, pending(job("j1", 4, "a")), pending(job("j2", 4, "a", 1)))
    assert out.placements["j1"].flavor == V100
    assert out.placements["j2"].flavor == P100


def test_a_queue_without_v100_quota_never_runs_on_v100() -> None:
    t = _one(QueueQuota.per_flavor("a", {P100: FlavorQuota(2, 0)}))
    out = run(cluster(), t, pending(job("j1", 2, "a")), pending(job("j2", 2, "a", 1)))
    assert out.placements["j1"].flavor == P100
    assert "j2" not in out.placements
    reason = out.pending["j2"]
    assert reason.kind is PendingKind.QUOTA
    assert str(reason) == ("queue 'a' at quota for P100: uses 2 of 2 (+0 borrowable); "
                           "needs 2")


def test_explain_names_the_flavor_quota_and_the_cohort() -> None:
    a = QueueQuota.per_flavor("a", {V100: FlavorQuota(4, None)}, cohort="c")
    b = QueueQuota.per_flavor("b", {V100: FlavorQuota(4, None)}, cohort="c")
    t = _one(a, b, cohorts={"c": Cohort("c")})
    out = run(cluster(), t, running(job("r", 4, "b"), V100), running(job("s", 4, "a"), V100),
              pending(job("j", 2, "a", 1)))
    assert str(out.pending["j"]) == ("queue 'a' at quota for V100-16GB: uses 4 of 4 "
                                     "(+0 borrowable), cohort 'c' has 0 idle; needs 2")


def test_one_number_quotas_keep_their_meaning_in_a_tenancy() -> None:
    # A tenancy of one-number queues without cohorts decides as Snapshot.quotas does.
    q = QueueQuota("team", nominal_gpus=2, borrowing_limit_gpus=1)
    jobs = [pending(job(f"j{i}", 1, "team", i)) for i in range(5)]
    c = cluster()
    with_t = run(c, _one(q), *jobs)
    plain = run(c, None, *jobs, quotas={"team": q})
    assert set(with_t.placements) == set(plain.placements) == {"j0", "j1", "j2"}
    assert str(with_t.pending["j3"]) == str(plain.pending["j3"])


def test_snapshot_carries_the_tenancy_through_with_jobs() -> None:
    t = _one(QueueQuota("a", 1))
    s = Snapshot(0.0, cluster(), (), tenancy=t)
    assert s.with_jobs(()).tenancy is t
    assert s.queue_quotas() is t.queues
