"""Heterogeneity-aware shortest-remaining-processing-time (Tessera's JCT policy).

On one machine, running the job with the shortest remaining time first (SRPT) minimises average
completion time. On mixed GPUs "remaining time" depends on where a job runs: a job that is 10×
faster on a V100 than on a K80 should get the V100 before one that is only 1.2× faster, even if
it is a little longer. So this policy scores every (job, flavor) pair by the rate at which
running it there *completes jobs*:

    value[m, j] = 1 / (remaining_steps_m / T[m, j] + restart_s · [m is not already on j])

and solves the LP ``max Σ value · X`` over the usual jobs × flavors capacity constraints (HiGHS).
With gang size ``sf_m`` counting against a flavor's GPUs, the LP prefers jobs that complete the
most per GPU. The restart term is the checkpoint/restore time a move would cost, so a running
job is only displaced when the newcomer is worth it.

The LP solution is turned into a ranking: pairs the LP selected (largest share first), then every
other pair by value per GPU, so spare GPUs are backfilled. When no flavor is contended (every job
fits on its fastest flavor) the LP is skipped: the answer is obvious.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from tessera.sched.policies.allocation import build_problem, linear_lp
from tessera.sched.policy import POLICIES, Policy, PolicyConfig, PolicyContext, Ranking


class HeteroSrptConfig(PolicyConfig):
    restart_s: float = Field(
        60.0, ge=0, description="checkpoint + restore seconds charged to moving a job"
    )


@POLICIES.register(
    "hetero_srpt",
    "Tessera: heterogeneity-aware SRPT; LP matches short, high-speed-up jobs to fast GPUs.",
)
class HeteroSrpt(Policy):
    preemptive = True
    Config = HeteroSrptConfig

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, HeteroSrptConfig)
        p = build_problem(ctx)
        if not p.jobs:
            return Ranking(())
        remaining = np.array([j.remaining_steps for j in p.jobs])
        with np.errstate(divide="ignore"):
            time_s = np.where(p.tput > 0, remaining[:, None] / np.maximum(p.tput, 1e-300), np.inf)
        col = {f: i for i, f in enumerate(p.flavors)}
        restart = np.full(p.tput.shape, cfg.restart_s)
        for m, j in enumerate(p.jobs):
            if j.running and j.placement is not None and j.placement.flavor in col:
                restart[m, col[j.placement.flavor]] = 0.0
        value = np.where(np.isfinite(time_s), 1.0 / (time_s + restart + 1e-9), 0.0)
        per_gpu = value / p.scale[:, None]
        if self._contended(p.tput, p.scale, p.capacity):
            x = linear_lp(p, value, "hetero_srpt LP")
        else:
            x = np.zeros_like(value)
            best = np.argmax(np.where(p.tput > 0, p.tput, -1), axis=1)
            runnable = p.tput.max(axis=1) > 0
            x[np.flatnonzero(runnable), best[runnable]] = 1.0
        rows, cols = np.nonzero(value > 0)
        chosen = x[rows, cols] > 1e-6
        order = np.lexsort((-per_gpu[rows, cols], -x[rows, cols], ~chosen))
        ids = p.job_ids
        cands = tuple((ids[rows[k]], p.flavors[cols[k]]) for k in order)
        return Ranking(cands)

    @staticmethod
    def _contended(tput: np.ndarray, scale: np.ndarray, capacity: np.ndarray) -> bool:
        runnable = tput.max(axis=1) > 0
        if not runnable.any():
            return False
        best = np.argmax(np.where(tput > 0, tput, -1), axis=1)
        demand = np.bincount(best[runnable], weights=scale[runnable], minlength=len(capacity))
        return bool((demand > capacity).any())
