"""Synergy's multi-resource baselines: DRF and TETRIS as job orderings.

Synergy (OSDI'22, section 5) compares its allocations with two classic multi-resource
schedulers, each an *order* over jobs (its ``schedulers/drf.py`` and ``tetris.py``, read and
followed); the CPUs and memory each placed gang then gets are the resource mode's
(``drf:resources=greedy``, Synergy's usual pairing, or ``tetris:resources=tune``). A job's
demand vector is ``(GPUs, CPUs, memory)`` with CPUs and memory its best-speed demand
(:func:`~tessera.sched.resources.allocate.ideal_per_gpu`, the GPU-proportional share for a job
without a profile), each divided by the cluster's total of that resource:

* **DRF** (Ghodsi et al., NSDI'11) -- smallest *dominant share* (the largest of the three
  fractions) first, then arrival; preemptive, as Synergy re-sorts every round.
* **TETRIS** (Grandl et al., SIGCOMM'14), as Synergy uses it -- smallest remaining duration
  times the *sum* of the three fractions first (packing small, short jobs first), then
  arrival. The remaining duration is the oracle's (the simulator's true remaining work), so
  TETRIS is marked as reading an oracle; preemptive.
"""

from __future__ import annotations

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobSpec
from tessera.model.resources import proportional_share
from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.policies.common import candidates_in_order, remaining_s
from tessera.sched.resources.allocate import ideal_per_gpu


def demand_fractions(spec: JobSpec, cluster: ClusterSpec) -> tuple[float, float, float]:
    """``(GPUs, CPUs, memory)`` the job asks for, each as a fraction of the cluster's total."""
    nodes = cluster.nodes
    gpus = sum(n.gpus for n in nodes) or 1
    cpus = sum(n.cpu_cores for n in nodes) or 1
    mem = sum(n.mem_gib for n in nodes) or 1.0
    first = nodes[0]
    prop_c, prop_m = proportional_share(1, first.gpus, first.cpu_cores, first.mem_gib)
    c, m = ideal_per_gpu(spec, prop_c, prop_m)
    g = spec.num_gpus
    return g / gpus, c * g / cpus, m * g / mem


class DominantResourceFairness(Policy):
    preemptive = True

    def rank(self, ctx: PolicyContext) -> Ranking:
        cluster = ctx.snapshot.cluster
        share = {j.spec.job_id: max(demand_fractions(j.spec, cluster))
                 for j in ctx.snapshot.jobs}
        jobs = sorted(ctx.snapshot.jobs,
                      key=lambda j: (share[j.spec.job_id], j.spec.submit_time_s))
        return Ranking(candidates_in_order(ctx, jobs))


class Tetris(Policy):
    preemptive = True
    oracle = "each job's true remaining time, taken from the trace"

    def rank(self, ctx: PolicyContext) -> Ranking:
        cluster = ctx.snapshot.cluster
        score = {j.spec.job_id: remaining_s(ctx, j) * sum(demand_fractions(j.spec, cluster))
                 for j in ctx.snapshot.jobs}
        jobs = sorted(ctx.snapshot.jobs,
                      key=lambda j: (score[j.spec.job_id], j.spec.submit_time_s))
        return Ranking(candidates_in_order(ctx, jobs))
