"""Placement identity: what co-location counts as "the same GPUs"."""

from __future__ import annotations

from dataclasses import replace

from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement


def test_same_gpus_ignores_the_partner_and_the_batch_but_not_the_gpus() -> None:
    p = Placement.of(resolve_flavor("V100-16GB"), (("v100-0000", 2),))
    assert p.same_gpus(replace(p, colocated_with=("b",), global_batch_samples=64))
    assert not p.same_gpus(Placement.of(resolve_flavor("V100-16GB"), (("v100-0001", 2),)))
    assert not p.same_gpus(Placement.of(resolve_flavor("K80"), (("v100-0000", 2),)))
    assert not p.same_gpus(Placement.of(resolve_flavor("V100-16GB"), (("v100-0000", 1),)))


def test_with_jobs_is_replace_of_the_jobs_field_by_field() -> None:
    from dataclasses import fields

    from tessera.model.jobs import JobState
    from tessera.sched.core.snapshot import JobSplit, JobView, QueueQuota, Snapshot
    from tests.builders import make_cluster, make_job

    cluster = make_cluster().node("v100", gpus=4, count=2).build()
    a = JobView(make_job("a"), JobState.PENDING, 10.0)
    b = JobView(make_job("b"), JobState.PENDING, 20.0)
    snap = Snapshot(
        now_s=5.0, cluster=cluster, jobs=(a, b), quotas={"q": QueueQuota("q", 4)},
        policy_state={"memory": 1}, round_s=360.0, down_nodes=frozenset({"x"}),
        free_gpus={"x": 0}, split_hint=JobSplit.of((a, b)),
    )
    only_b = (b,)
    narrowed, expected = snap.with_jobs(only_b), replace(snap, jobs=only_b)
    for f in fields(Snapshot):  # (every field, also those equality leaves out)
        assert getattr(narrowed, f.name) is getattr(expected, f.name), f.name
    assert narrowed.split() == JobSplit.of(only_b)
