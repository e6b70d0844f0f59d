"""``Snapshot.gpu_draining``: GPUs a stopping run holds count against its queue's GPU quota,
in the plain round's admission (one-number quotas) and in the tenancy round's quota book
(cohorts, per-flavor quotas) alike (review4, item 1)."""

from __future__ import annotations

from tessera.sched.core.decide import PendingKind
from tessera.sched.core.quotas import Cohort, FlavorQuota, QueueQuota
from tessera.sched.core.snapshot import Placement
from tessera.sched.core.tenancy import Tenancy
from tests.sched.quota_world import NODE, V100, cluster, job, pending, run

DRAINING_A = (("a", Placement.of(V100, ((NODE[V100], 2),))),)


def _tree(borrow_a: int | None) -> Tenancy:
    return Tenancy(queues={
        "a": QueueQuota.per_flavor("a", {V100: FlavorQuota(2, borrow_a)}, cohort="root"),
        "b": QueueQuota.per_flavor("b", {V100: FlavorQuota(2)}, cohort="root")},
        cohorts={"root": Cohort("root")})


def test_the_tenancy_round_charges_a_draining_run_to_its_queue() -> None:
    c = cluster(gpus=8)
    assert "j" in run(c, _tree(0), pending(job("j", 2, "a"))).placements
    out = run(c, _tree(0), pending(job("j", 2, "a")), gpu_draining=DRAINING_A)
    assert out.pending["j"].kind is PendingKind.QUOTA  # a's 2 GPUs are still held


def test_a_draining_run_takes_from_what_its_queue_may_borrow() -> None:
    # a may borrow b's 2: with its own 2 draining it may start 2 more, not 4.
    c = cluster(gpus=8)
    assert "j" in run(c, _tree(None), pending(job("j", 4, "a"))).placements
    out = run(c, _tree(None), pending(job("j", 4, "a")), gpu_draining=DRAINING_A)
    assert out.pending["j"].kind is PendingKind.QUOTA
    assert "k" in run(c, _tree(None), pending(job("k", 2, "a")),
                      gpu_draining=DRAINING_A).placements


def test_the_plain_rounds_admission_charges_a_draining_run_to_its_queue() -> None:
    c = cluster(gpus=8)
    quotas = {"a": QueueQuota("a", 2, 0)}
    assert "j" in run(c, None, pending(job("j", 2, "a")), quotas=quotas).placements
    out = run(c, None, pending(job("j", 2, "a")), quotas=quotas, gpu_draining=DRAINING_A)
    assert out.pending["j"].kind is PendingKind.QUOTA
    assert "uses 2 of 2 GPUs" in str(out.pending["j"])  # the reason counts the draining run
