"""Helpers shared by ordering policies."""

from __future__ import annotations

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.policy import PolicyContext
from tessera.sched.core.snapshot import JobView


def flavors_fastest_first(ctx: PolicyContext, job: JobView) -> tuple[GpuFlavor, ...]:
    """The job's usable flavors, fastest first as the policy sees them.

    Aware policies see real speeds; agnostic ones see equal speeds, so the order falls back to
    the job's own preference order (or the cluster's order), which the sort keeps stable.
    """
    return ctx.oracle.fastest_first(job.spec)


def candidates_in_order(
    ctx: PolicyContext, ordered: list[JobView]
) -> tuple[tuple[JobId, GpuFlavor], ...]:
    """Expand an ordered job list into (job, flavor) candidates, flavors fastest first."""
    fastest_first = ctx.oracle.fastest_first
    return tuple([(j.spec.job_id, fl) for j in ordered for fl in fastest_first(j.spec)])


def remaining_s(ctx: PolicyContext, job: JobView) -> float:
    """Remaining time on the job's fastest flavor (oracle knowledge, as SRTF assumes)."""
    rate = ctx.oracle.best_rate(job.spec)
    return job.remaining_at(ctx.snapshot.now_s) / rate if rate > 0 else float("inf")
