"""First in, first out: jobs start in submission order, never preempted.

Later jobs may start ahead of an earlier one that does not fit yet (backfilling), so one large
gang cannot block a cluster with free GPUs. The aware variant puts each job on the fastest flavor
with room; the agnostic one takes flavors in the cluster's order.
"""

from __future__ import annotations

from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.policies.common import candidates_in_order


class Fifo(Policy):
    preemptive = False

    def rank(self, ctx: PolicyContext) -> Ranking:
        jobs = sorted(ctx.snapshot.jobs, key=lambda j: (j.spec.submit_time_s, j.spec.job_id))
        return Ranking(candidates_in_order(ctx, jobs))
