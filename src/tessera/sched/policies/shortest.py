"""Shortest job first (SJF) and shortest remaining time first (SRTF).

Both use *oracle* durations (the simulator knows every job's work), so they are bounds on what
duration-based scheduling can achieve, not deployable policies. SJF orders by total isolated
duration and never preempts; SRTF orders by remaining time and preempts.
"""

from __future__ import annotations

from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView
from tessera.sched.policies.common import candidates_in_order, remaining_s


class ShortestJobFirst(Policy):
    preemptive = False
    oracle = "each job's true total duration, taken from the trace"

    def rank(self, ctx: PolicyContext) -> Ranking:
        def total_s(j: JobView) -> float:
            rate = ctx.oracle.best_rate(j.spec)
            return j.spec.total_steps / rate if rate > 0 else float("inf")

        jobs = sorted(ctx.snapshot.jobs, key=lambda j: (total_s(j), j.spec.submit_time_s))
        return Ranking(candidates_in_order(ctx, jobs))


class ShortestRemainingTimeFirst(Policy):
    preemptive = True
    oracle = "each job's true remaining time, taken from the trace"

    def rank(self, ctx: PolicyContext) -> Ranking:
        jobs = sorted(
            ctx.snapshot.jobs, key=lambda j: (remaining_s(ctx, j), j.spec.submit_time_s)
        )
        return Ranking(candidates_in_order(ctx, jobs))
