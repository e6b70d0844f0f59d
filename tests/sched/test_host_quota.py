"""Queues' ``cpus``/``memory`` quotas, charged by CPU-only jobs (issue 33, part 2).

:mod:`tessera.sched.core.host_quota` and the CPU stage: a CPU-only job that would take its
queue over its CPU or memory quota waits (reason: quota, naming the resource); a queue without
one is unlimited, as before; GPU jobs are never charged.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tessera.errors import SpecError
from tessera.live.tenancy_yaml import tenancy_from_tessera
from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.model.resources import HostDemand
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.host_quota import HostQuotaHeld
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.quotas import QueueQuota
from tessera.sched.core.reasons import PendingKind
from tessera.sched.core.snapshot import JobView, Placement
from tests.builders import make_job, snapshot, view

V100 = resolve_flavor("v100")
N0 = "v100-16gb-0000"


def cluster() -> ClusterSpec:
    return ClusterSpec("t", tuple(replace(n, nvlink_domain=None) for n in make_nodes(V100, 1, 8)))


def cpu(job_id: str, cpus: float, mem_gib: float = 8.0, queue: str = "team-a",
        submit_s: float = 0.0) -> JobView:
    return view(make_job(job_id, gpus=0, steps=3600.0, queue=queue, submit_s=submit_s,
                         cpu_steps_per_s=1.0, host=HostDemand(cpus, mem_gib, per_gpu=False)))


def running(v: JobView) -> JobView:
    cpus, mem = v.spec.host.total(0)  # type: ignore[union-attr]
    return replace(v, state=JobState.RUNNING,
                   placement=Placement((V100,), ((N0, 0),), host_by_node=((N0, cpus, mem),)))


def run(*views: JobView, cpus: float | None = None, mem_gib: float | None = None) -> Decision:
    c = cluster()
    quotas = {"team-a": QueueQuota("team-a", 8, nominal_cpus=cpus, nominal_mem_gib=mem_gib),
              "team-b": QueueQuota("team-b", 8)}
    return decide(snapshot(c, *views, quotas=quotas), make_policy("fifo"),
                  DecisionContext(ThroughputOracle(default_throughputs(), c), random.Random(0)))


def test_a_cpu_job_that_would_take_its_queue_over_its_cpus_waits_on_quota() -> None:
    d = run(running(cpu("a-run", 16.0)), cpu("a-new", 16.0, submit_s=1.0),
            cpu("b-new", 16.0, queue="team-b", submit_s=2.0), cpus=24.0)
    r = d.pending["a-new"]  # type: ignore[index]
    assert r.kind is PendingKind.QUOTA and isinstance(r.detail, HostQuotaHeld)
    assert str(r) == ("queue 'team-a' at its CPU quota: its CPU-only jobs hold 16 of 24 CPUs; "
                      "needs 16")
    assert "b-new" in d.started  # (team-b has no CPU quota: unlimited, as before)


def test_the_jobs_a_round_places_are_charged_and_a_smaller_one_still_fits() -> None:
    d = run(cpu("a1", 16.0), cpu("a2", 16.0, submit_s=1.0), cpu("a3", 8.0, submit_s=2.0),
            cpus=24.0)
    assert set(d.started) == {"a1", "a3"} and d.pending["a2"].kind is PendingKind.QUOTA  # type: ignore[index]


def test_the_memory_quota_binds_and_says_memory() -> None:
    d = run(running(cpu("a-run", 4.0, 96.0)), cpu("a-new", 4.0, 64.0, submit_s=1.0),
            mem_gib=128.0)
    assert str(d.pending["a-new"]) == (  # type: ignore[index]
        "queue 'team-a' at its memory quota: its CPU-only jobs hold 96 of 128 GiB of host "
        "memory; needs 64")


def test_no_quota_is_no_limit_and_gpu_jobs_are_never_charged() -> None:
    d = run(cpu("a1", 16.0), cpu("a2", 16.0, submit_s=1.0))
    assert set(d.started) == {"a1", "a2"}
    d = run(view(make_job("g", gpus=8, queue="team-a")), cpus=1.0)  # all 64 CPUs with its GPUs
    assert d.started == ("g",)


def test_the_yaml_reads_cpus_and_memory_with_units() -> None:
    t = tenancy_from_tessera({"queues": [
        {"name": "a", "nominal_gpus": 4, "cpus": "1500m", "memory": "512Mi"},
        {"name": "b", "nominal_gpus": 4}]}, "t.yaml").tree
    assert (t.queues["a"].nominal_cpus, t.queues["a"].nominal_mem_gib) == (1.5, 0.5)
    assert (t.queues["b"].nominal_cpus, t.queues["b"].nominal_mem_gib) == (None, None)


@pytest.mark.parametrize(("field", "value"), [("cpus", -2), ("memory", "12Qi"),
                                              ("cpus", "lots")])
def test_a_bad_cpus_or_memory_quota_is_refused_naming_the_queue(field: str,
                                                               value: object) -> None:
    with pytest.raises(SpecError, match=f"queue 'a'.*{field}"):
        tenancy_from_tessera({"queues": [{"name": "a", "nominal_gpus": 4, field: value}]},
                             "t.yaml")
    with pytest.raises(SpecError, match="queue 'q': cpus must be a number >= 0"):
        QueueQuota("q", 1, nominal_cpus=float("nan")).check()
