"""A small world for the quota enforcement tests (tests/sched/test_quota_*.py): a V100 and a
P100 node of 8 GPUs (the profiles rank V100 first), jobs and running gangs, and one
``decide`` call under a tenancy."""

from __future__ import annotations

import random

from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobSpec, JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sched.core.tenancy import Tenancy
from tests.builders import make_cluster, make_job, view

V100 = resolve_flavor("V100")
P100 = resolve_flavor("P100")
NODE = {V100: "v100-16gb-0000", P100: "p100-0000"}


def cluster(v100_nodes: int = 1, p100_nodes: int = 1, gpus: int = 8):  # type: ignore[no-untyped-def]
    b = make_cluster()
    if v100_nodes:
        b = b.node("v100", gpus=gpus, count=v100_nodes)
    if p100_nodes:
        b = b.node("p100", gpus=gpus, count=p100_nodes)
    return b.build()


def job(jid: str, gpus: int, queue: str, submit_s: float = 0.0, priority: int = 0,
        **kw: object) -> JobSpec:
    return make_job(jid, gpus, submit_s=submit_s, queue=queue, priority=priority, **kw)


def pending(spec: JobSpec, since_s: float | None = None) -> JobView:
    return view(spec, pending_since_s=spec.submit_time_s if since_s is None else since_s)


def running(spec: JobSpec, flavor: GpuFlavor, started_s: float = 0.0,
            node: str | None = None) -> JobView:
    p = Placement.of(flavor, ((node or NODE[flavor], spec.num_gpus),))
    return view(spec, JobState.RUNNING, p, progress_from_s=started_s, as_of_s=started_s)


def context(c) -> DecisionContext:  # type: ignore[no-untyped-def]
    return DecisionContext(ThroughputOracle(default_throughputs(), c), random.Random(0))


def run(c, tenancy: Tenancy | None, *views: JobView, now_s: float = 0.0,  # type: ignore[no-untyped-def]
        policy: str = "fifo", ctx: DecisionContext | None = None, **kw: object) -> Decision:
    if tenancy is not None:
        tenancy.check()
    snap = Snapshot(now_s, c, tuple(views), tenancy=tenancy, **kw)  # type: ignore[arg-type]
    return decide(snap, make_policy(policy), ctx or context(c))
