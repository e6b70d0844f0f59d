"""Elastic growth within per-flavor quotas (issue 32): under a tenancy, an elastic policy's
size for a job is placed only when the queue's quota for that flavor holds it."""

from __future__ import annotations

import random

from tessera.model.jobs import JobId
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.quotas import Cohort, FlavorQuota, QueueQuota
from tessera.sched.core.snapshot import Placement
from tessera.sched.core.tenancy import Tenancy
from tessera.sched.elastic.sizes import ElasticSize
from tests.builders import make_cluster, make_job, snapshot, view
from tests.sched.test_elastic_core import _A100_40GB, CIFAR, CIFAR_TYPE, Ranking, _Fixed


def _grow(quota_gpus: int) -> dict[JobId, object]:
    c = make_cluster().node(_A100_40GB, gpus=8, count=2).build()
    q = QueueQuota.per_flavor("a", {_A100_40GB: FlavorQuota(quota_gpus, 0)}, cohort="root")
    t = Tenancy(queues={"a": q}, cohorts={"root": Cohort("root")})
    job = make_job("e", 2, job_type=CIFAR_TYPE, elastic=CIFAR, queue="a")
    ranking = Ranking(((JobId("e"), _A100_40GB),), sizes={JobId("e"): ElasticSize(8, 4096)})
    ctx = DecisionContext(ThroughputOracle(sia_throughputs(), c), random.Random(0))
    d = decide(snapshot(c, view(job), round_s=60.0, tenancy=t), _Fixed(ranking), ctx)
    return {"gpus": d.placements[JobId("e")].num_gpus, "note": d.notes.get(JobId("e"), "")}


def test_growth_stays_within_the_flavor_quota() -> None:
    assert _grow(8)["gpus"] == 8
    capped = _grow(4)
    assert capped["gpus"] == 2 and "size 8 GPUs refused" in str(capped["note"])


def _grow_one_number(draining: tuple[tuple[str, Placement], ...]) -> dict[str, object]:
    c = make_cluster().node(_A100_40GB, gpus=8, count=2).build()
    job = make_job("e", 2, job_type=CIFAR_TYPE, elastic=CIFAR, queue="a")
    ranking = Ranking(((JobId("e"), _A100_40GB),), sizes={JobId("e"): ElasticSize(4, 2048)})
    ctx = DecisionContext(ThroughputOracle(sia_throughputs(), c), random.Random(0))
    d = decide(snapshot(c, view(job), round_s=60.0, quotas={"a": QueueQuota("a", 4, 0)},
                        gpu_draining=draining), _Fixed(ranking), ctx)
    return {"gpus": d.placements[JobId("e")].num_gpus, "note": d.notes.get(JobId("e"), "")}


def test_growth_counts_the_gpus_a_stopping_run_of_its_queue_still_holds() -> None:
    """One-number quota 4, borrowing 0: a 2-GPU elastic job may grow to 4, but not while a
    cancelled run of its queue still holds 2 in its grace period (``Snapshot.gpu_draining``;
    it grew to 4, the queue holding 6)."""
    assert _grow_one_number(())["gpus"] == 4
    node = next(iter(make_cluster().node(_A100_40GB, gpus=8, count=2).build().nodes))
    held = _grow_one_number((("a", Placement.of(_A100_40GB, ((node.node_id, 2),))),))
    assert held["gpus"] == 2 and "would hold 6 GPUs, over its limit of 4" in str(held["note"])
