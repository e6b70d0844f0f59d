"""Sia (Jayaram Subramanya et al., SOSP'23): goodput-optimised, heterogeneity-aware allocation.

Every round (Sia runs 60 s rounds: ``SchedulerSettings(round_s=60)``) Sia re-decides every
job's *configuration*: a GPU flavor and a GPU count from a fixed set per flavor -- on servers
of ``G`` GPUs, 1, 2, 4 … GPUs on one server, then whole servers ``G``, ``2G`` …
(:func:`~tessera.sched.elastic.goodput.sia_configs`). For each job and configuration:

1. **goodput** ``g[j,c]``: the job's throughput × statistical efficiency at its current
   progress, at the best batch for that configuration (``GoodputModel``; Sia's jobs tune their
   batch, with gradient accumulation where a GPU's share does not fit);
2. **normalisation across GPU types**: each job's goodputs are divided by its smallest one over
   every configuration of every flavor, so every job's least useful configuration is worth 1
   and the values say "how many of its worst allocations this one is worth" -- comparable
   between a cifar10 job and an imagenet job although their samples/s differ 100-fold;
3. **restart penalty**: every configuration except the one the job holds is multiplied by the
   re-allocation factor ``(age − restarts × r) / (age + r)`` with ``r`` the model's measured
   checkpoint-restore time (:data:`~tessera.sched.elastic.goodput.RESTART_S`, 25-250 s), so a
   change must pay for the restart; a job mid-restart keeps its GPUs (pinned);
4. **fairness exponent** ``p`` (Sia's default −0.5): the solver *minimises*
   ``Σ x[j,c] · round(g[j,c]^p, 2) + λ_n · (jobs left without GPUs)`` with ``λ_n`` = 1.1; as
   ``g ≥ 1``, ``g^p ≤ 1 < λ_n``: giving a job any configuration beats leaving it out, and
   among configurations the concave ``g^p`` favours spreading goodput over hoarding it.

The program (one configuration per job, GPU capacity per flavor, binary) is solved exactly with
HiGHS (:mod:`tessera.sched.elastic.ilp`), where Sia's artifact used CBC through CVXPY.

As in Sia's simulator, a job may be given at most twice the most GPUs it has run on so far
(``explore``; 1 GPU before its first run): its throughput model is fitted to what it has run on.

Rigid jobs take part at their own count on every flavor they are profiled on, with goodput =
throughput normalised so their slowest flavor is worth their GPU count (as Sia does).

Known differences from Sia's simulator: Sia fits a job's throughput model to the step times it
observes and projects it to GPU types the job has not run on; here the goodput model is the
measured profile of every type from the start (only the doubling cap above is kept), with
gangs beyond the placement files (20-24 T4s, 24 RTX 2080 Tis) interpolated from the
scalability rows as Sia's simulator computes their true speed
(:mod:`tessera.perf.goodput`). Sia's policy plans a job's goodput with batches up to the
trace's batch (its speed-up function's cap) while the job then runs at the best batch up to
the model's largest; here the policy plans with the batches the job runs at.
"""

from __future__ import annotations

from pydantic import Field

from tessera.sched.core.policy import PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView
from tessera.sched.elastic.goodput import (
    DEFAULT_RESTART_S,
    progress_samples,
    restart_s,
    sia_configs,
)
from tessera.sched.elastic.ilp import choose_configs
from tessera.sched.elastic.policy import (
    ConfigSet,
    ElasticMemory,
    ElasticPolicy,
    answer,
    capacity,
    damp_changes,
    rigid_rates,
)


class SiaConfig(PolicyConfig):
    """Sia's knobs, defaults as in its artifact's evaluation scripts."""

    p: float = Field(-0.5, lt=0, description="Fairness exponent on normalised goodput (< 0).")
    lambda_n: float = Field(1.1, gt=1, description="Cost of leaving a job without GPUs.")
    mip_rel_gap: float = Field(1e-4, ge=0, description="HiGHS' relative MIP gap.")
    time_limit_s: float = Field(10.0, gt=0, description="HiGHS' time limit per round (s).")
    explore: bool = Field(
        True, description="Cap a job at twice the most GPUs it has run on, as Sia's simulator "
        "does while it learns the job's throughput model.")


class Sia(ElasticPolicy):
    Config = SiaConfig

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, SiaConfig)
        snap = ctx.snapshot
        nodes = snap.up_nodes()
        sets = ConfigSet(sia_configs(nodes), nodes)
        memory = ElasticMemory.of(snap.policy_state)
        values: list[list[tuple[int, float]]] = []
        batches: dict[tuple[int, int], float] = {}
        pinned: dict[int, int] = {}
        for j, v in enumerate(snap.jobs):
            most = memory.explored_max(v) if cfg.explore else 1 << 30
            goodputs, penalty_s = self._goodputs(ctx, sets, v, j, most, batches)
            cur = sets.current(v)
            goodputs = damp_changes(goodputs, v, cur, memory, snap.now_s, penalty_s)
            if goodputs and cur is not None and snap.now_s < v.progress_from_s:
                pinned[j] = cur  # mid checkpoint-restore: it keeps its GPUs
            values.append([(c, cfg.lambda_n - round(max(g, 1e-4) ** cfg.p, 2))
                           for c, g in goodputs])
        pinned = {j: c for j, c in pinned.items() if any(k == c for k, _ in values[j])}
        choices = choose_configs(values, sets.configs, capacity(nodes), pinned,
                                 cfg.mip_rel_gap, cfg.time_limit_s)
        return answer(snap, sets, choices, batches, memory, "sia")

    def _goodputs(self, ctx: PolicyContext, sets: ConfigSet, v: JobView, j: int, most: int,
                  batches: dict[tuple[int, int], float]) -> tuple[list[tuple[int, float]], float]:
        """Normalised goodput of job ``v`` (index ``j``) per configuration of at most ``most``
        GPUs, and its restart time; records each elastic configuration's batch in ``batches``."""
        spec = v.spec
        e = spec.elastic
        if e is None:
            raw = rigid_rates(ctx, sets, spec)
            if not raw:
                return [], DEFAULT_RESTART_S
            lo = min(g for _c, g in raw)
            return [(c, g / lo * spec.num_gpus) for c, g in raw], DEFAULT_RESTART_S
        raw = self.elastic_row(spec, sets, most, progress_samples(v, ctx.snapshot.now_s), j,
                               batches, v.noise_scale_samples, v.step_fits)
        if not raw:
            return [], restart_s(e)
        lo = min(g for _c, g in raw)
        return [(c, g / lo) for c, g in raw], restart_s(e)
