"""Tiresias' discretised two-dimensional least-attained-service (2D-LAS).

A job's *attained service* is GPUs × seconds it has run. Jobs sit in priority queues by attained
service: a job starts in queue 0 and drops to queue ``k`` once its service passes threshold
``L_{k-1}``. The scheduler walks queue 0 first, then 1, ...; inside a queue, submission order.
A job that has received little service -- usually a short one -- therefore runs first, without
anyone knowing durations in advance. Running jobs are preempted by higher-priority arrivals.

Starvation guard (optional, ``starvation_factor`` N): a job waiting at least N times as long as
it has run since its last promotion is promoted back to queue 0.

The policy asks to be woken when a running job will cross its queue threshold, so demotions
happen on time even when no job arrives or finishes.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from types import MappingProxyType

from pydantic import Field

from tessera.model.jobs import JobId
from tessera.sched.core.policy import Policy, PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView
from tessera.sched.policies.common import candidates_in_order


class LasConfig(PolicyConfig):
    queue_thresholds_gpu_s: tuple[float, ...] = Field(
        (3600.0,), description="attained-service thresholds between queues (GPU-seconds)"
    )
    starvation_factor: float | None = Field(
        None, gt=0, description="promote a job back to queue 0 after waiting N× its run time"
    )


class LeastAttainedService(Policy):
    preemptive = True
    Config = LasConfig

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, LasConfig)
        thresholds = sorted(cfg.queue_thresholds_gpu_s)
        now = ctx.snapshot.now_s
        offsets: Mapping[JobId, float] = ctx.snapshot.policy_state or {}
        new_offsets = dict(offsets) if cfg.starvation_factor else {}

        def service(j: JobView) -> float:
            return j.attained_at(now) - offsets.get(j.job_id, 0.0)

        if cfg.starvation_factor:
            for j in ctx.snapshot.jobs:
                if j.running or j.last_run_end_s is None:
                    continue
                ran = service(j) / j.spec.num_gpus
                if ran > 0 and now - j.last_run_end_s >= cfg.starvation_factor * ran:
                    new_offsets[j.job_id] = j.attained_at(now)

        def queue(j: JobView) -> int:
            s = j.attained_at(now) - new_offsets.get(j.job_id, 0.0)
            return bisect.bisect_right(thresholds, s)

        jobs = sorted(
            ctx.snapshot.jobs, key=lambda j: (queue(j), j.spec.submit_time_s, j.spec.job_id)
        )
        wakeup: float | None = None
        for j in ctx.snapshot.jobs:
            if not j.running:
                continue
            q = queue(j)
            if q < len(thresholds):
                s = j.attained_at(now) - new_offsets.get(j.job_id, 0.0)
                t = now + (thresholds[q] - s) / j.spec.num_gpus
                wakeup = t if wakeup is None else min(wakeup, t)
        state = MappingProxyType(new_offsets) if new_offsets else None
        return Ranking(candidates_in_order(ctx, jobs), state=state, wakeup_s=wakeup)
