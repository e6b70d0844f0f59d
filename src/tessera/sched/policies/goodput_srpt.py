"""Tessera's elastic policy: Sia's goodput allocation with seats first, a completion-rate tilt.

``goodput_srpt`` keeps Sia's machinery -- configurations per flavor, goodput at the best batch
normalised by the job's smallest configuration (``s``), restart damping, the exploration cap,
the exact one-configuration-per-job solve -- and changes three things:

* **seats first, lexicographically**: every job that fits gets a configuration before any job
  grows (Sia only approximates this with ``λ_n = 1.1``, and its values rounded to 2 decimals
  tie often); the objective is then ``Σ w_j · (1 − s^p)`` with ``p`` = −0.25 (Sia: −0.5);
* **completion-rate tilt** (``beta``): ``w_j = (mean τ̂ / τ̂_j)^beta`` favours jobs with less
  work left, the idea behind ``hetero_srpt``'s matching, with ``τ̂_j`` estimated *without an
  oracle* from the work done (as LAS and ``hetero_gittins`` do: heavy-tailed job sizes make a
  job that has run longer likely to run longer still): its progress in seconds of its smallest
  configuration plus ``quantum_s``; ``remaining="declared"`` uses its declared target instead;
* **starvation guard**: a job that has waited more than ``starvation_factor`` × ``τ̂_j`` without
  GPUs has ``τ̂_j`` divided by ``boost``.

``damping="remaining"`` replaces Sia's re-allocation factor by the speed-up a configuration is
worth once its restart is paid over the estimated remaining time (:func:`paid_restart`).

Measured on ``sia-philly-1`` (calibrated, ``benchmarks/bench_elastic.py``): ``beta`` 0 / 0.5 / 1
gave 0.520 / 0.531 / 0.553 h, ``remaining="declared"`` with ``beta`` 1 0.573 h, the remaining-time
damping 0.543 h, ``p`` −1 / −0.5 / −0.25 0.519 / 0.520 / 0.517 h (Sia: 0.528 h): the tilt and the
damping did not pay on Sia's workloads and are off by default, so the default policy's gain over
Sia comes from the lexicographic seats and ``p`` alone, and is small (``docs/scheduler.md``).
"""

from __future__ import annotations

from typing import Literal

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


class GoodputSrptConfig(PolicyConfig):
    """``goodput_srpt``'s knobs."""

    remaining: Literal["attained", "declared"] = Field(
        "attained", description="Estimate of work left: from work done (no oracle) or the "
        "job's declared target.")
    quantum_s: float = Field(600.0, gt=0, description="Seconds of its smallest configuration "
                             "a new job is assumed to need.")
    starvation_factor: float = Field(4.0, gt=0, description="Boost a job that waited this many "
                                     "times its estimated remaining time.")
    boost: float = Field(1e3, ge=1, description="A starving job's estimate is divided by this.")
    p: float = Field(-0.25, lt=0, description="Exponent on normalised goodput, as Sia's p.")
    beta: float = Field(0.0, ge=0, description="Weight of the completion-rate tilt: a job's "
                        "goodput terms are weighted by (mean remaining / its remaining)^beta.")
    damping: Literal["remaining", "sia"] = Field(
        "sia", description="How a configuration change is charged its restart: by the "
        "job's estimated remaining time, or Sia's re-allocation factor.")
    explore: bool = Field(True, description="Cap a job at twice the most GPUs it has run on.")
    mip_rel_gap: float = Field(1e-4, ge=0, description="HiGHS' relative MIP gap.")
    time_limit_s: float = Field(10.0, gt=0, description="HiGHS' time limit per round (s).")


def paid_restart(speedup: float, restart_s: float, left_s: float) -> float:
    """The speed-up a configuration is worth once its restart is paid: a job with ``left_s``
    seconds of work left at speed-up 1 finishes in ``restart_s + left_s / speedup`` there, so
    its effective speed-up is ``left_s`` over that time."""
    return left_s / (restart_s + left_s / speedup)


class GoodputSrpt(ElasticPolicy):
    Config = GoodputSrptConfig

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, GoodputSrptConfig)
        snap = ctx.snapshot
        nodes = snap.up_nodes()
        sets = ConfigSet(sia_configs(nodes), nodes)
        memory = ElasticMemory.of(snap.policy_state)
        rows: list[tuple[list[tuple[int, float]], float]] = []
        batches: dict[tuple[int, int], float] = {}
        for j, v in enumerate(snap.jobs):
            most = memory.explored_max(v) if cfg.explore else 1 << 30
            speedups, left_s, penalty_s = self._speedups(ctx, sets, v, j, most, batches)
            cur = sets.current(v)
            if cfg.damping == "sia":
                speedups = damp_changes(speedups, v, cur, memory, snap.now_s, penalty_s)
            elif cfg.damping == "remaining":
                speedups = [(c, s if c == cur else paid_restart(s, penalty_s, left_s))
                            for c, s in speedups]
            waited_s = snap.now_s - v.spec.submit_time_s - sum(s for _f, s in v.run_s_by_flavor)
            if waited_s > cfg.starvation_factor * left_s:
                left_s /= cfg.boost
            rows.append((speedups, left_s))
        lefts = [left for row, left in rows if row]
        mean_s = sum(lefts) / len(lefts) if lefts else 1.0
        values = [[(c, (mean_s / left) ** cfg.beta * (1.0 - max(s, 1e-4) ** cfg.p))
                   for c, s in row]
                  for row, left in rows]
        # Serve as many jobs as fit first (Sia's λ_n, made lexicographic): a job's seat is
        # worth more than every other term together.
        seat = 1.0 + (len(values) + 1) * max((x for row in values for _c, x in row),
                                             default=0.0)
        values = [[(c, seat + x) for c, x in row] for row in values]
        choices = choose_configs(values, sets.configs, capacity(nodes), None,
                                 cfg.mip_rel_gap, cfg.time_limit_s)
        return answer(snap, sets, choices, batches, memory, "goodput_srpt")

    def _speedups(self, ctx: PolicyContext, sets: ConfigSet, v: JobView, j: int, most: int,
                  batches: dict[tuple[int, int], float],
                  ) -> tuple[list[tuple[int, float]], float, float]:
        """Job ``v``'s speed-up per configuration over its slowest one (Sia's normalisation),
        its estimated remaining time on that slowest configuration (s), and its restart time."""
        cfg = self.config
        assert isinstance(cfg, GoodputSrptConfig)
        spec = v.spec
        e = spec.elastic
        if e is None:  # rigid: its own count on each flavor, work in steps
            raw = rigid_rates(ctx, sets, spec)
            done = spec.total_steps - v.remaining_at(ctx.snapshot.now_s)
            total, penalty_s = spec.total_steps, DEFAULT_RESTART_S
        else:
            done = progress_samples(v, ctx.snapshot.now_s)
            raw = self.elastic_row(spec, sets, most, done, j, batches)
            total, penalty_s = e.target_samples, restart_s(e)
        if not raw:
            return [], 1.0, penalty_s
        lo = min(g for _c, g in raw)
        if cfg.remaining == "declared":
            left_s = max(total - done, 1e-9) / lo
        else:
            left_s = done / lo + cfg.quantum_s
        return [(c, g / lo) for c, g in raw], left_s, penalty_s
