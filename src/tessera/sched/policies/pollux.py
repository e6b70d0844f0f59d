"""Pollux (Qiao et al., OSDI'21): co-adaptive GPU counts and batch sizes by goodput, per round.

Every round (Pollux's simulator: 60 s) Pollux re-allocates GPUs to maximise a *fair* aggregate
of the jobs' speed-ups:

* **speed-up** of job ``j`` on an allocation ``a``: ``goodput_j(a) / goodput_j(fair share)``,
  where the fair share is ``ceil(total GPUs / active jobs)`` GPUs on one server and each goodput
  is at the best batch for its GPUs (the job tunes its own batch, AdaptDL-style, with gradient
  accumulation). The fair share's goodput is taken whatever the job may be given this round
  (the exploration cap below), as Pollux's ``Problem.__init__`` asks its model for it. In its
  simulator Pollux scales speed-ups by ``servers / total GPUs`` (a job's dominant share times
  the servers), so a speed-up of 1 is one server's worth;
* **restart penalty** (:func:`pollux_factor`): an allocation different from the job's current
  one is multiplied by ``max(age − restarts × 30 s, 0) / (age + 30 s)``. As in Pollux's
  ``Problem._evaluate`` (a restart is any state but the base one), a waiting job's allocation
  is such a change too, and no young job is exempt: a job is worth nothing in the round it
  arrives at age 0 (Sia's own factor, :func:`~tessera.sched.elastic.policy.realloc_factor`,
  spares jobs younger than one restart and jobs not running);
* **exploration**: a job may get at most twice the most GPUs it has run on (1 at first), as its
  throughput model is fitted to the placements it has run on;
* **fairness**: the power mean with ``p = −1`` over jobs of ``speed-up + 10⁻³``, maximised; a
  job left without GPUs counts ``10⁻³`` and so weighs ``1000`` -- Pollux serves as many jobs as it
  can before it speeds any up.

**The search.** Pollux searches allocations with a genetic algorithm (NSGA-II, 100 × 100, over
per-server replica counts). Here the same objective is optimised *exactly*: for ``p < 0``
maximising the power mean is minimising ``Σ_j (s_j + ε)^p``, a sum of one term per job, so
choosing one (flavor, GPU count) per job is the multiple-choice knapsack of
:mod:`tessera.sched.elastic.ilp` with value ``ε^p − (s + ε)^p``. An exact, deterministic
optimum of Pollux's objective is at least as good as the GA's answer, needs no random stream,
and takes milliseconds where 10,000 GA evaluations a round take seconds in Python. What the GA
could express and this cannot: a gang spread unevenly over servers (here the core packs it),
and Pollux's cluster auto-scaling (not modelled).

**Heterogeneity.** Pollux does not tell GPU types apart: Sia evaluates it so, on the same mixed
cluster. Here its goodput for ``n`` GPUs is the mean over the cluster's flavors of the measured
goodput of ``n`` GPUs of each (what one model fitted to a job's runs on every type would
predict), the same whichever flavor the core then places the gang on; the simulator runs the
gang at its flavor's true speed. Allocations are of one flavor at a time (the core's gangs).
As in Sia's heterogeneity-unaware runs (its artifact, ``sia-simulator/``): Pollux sees the
cluster as servers of the smallest server's GPUs (``cluster_unaware.py``, ``get_node_infos``:
16 "virtual nodes" of 4 GPUs on ``sia-64``), so speed-ups are scaled by ``1 / (GPUs of the
smallest server)``; and no job gets more GPUs than the smallest GPU type holds
(``multi_simulator_unaware.py``: ``max_num_replicas``, the least over types of their GPUs,
which ``cluster_unaware.py`` ``get_unaware_job_info`` applies to every job: 16 on
``sia-64``), so that any allocation fits on one type. What remains different there: Sia's
Pollux spreads a job's replicas over virtual nodes without knowing their type and, when they
span types, keeps the most numerous type's and drops the others
(``ClusterUnaware.fix_allocations_by_dropping``), so its jobs may run on fewer GPUs than
allocated, where here every gang is of one flavor; and each job's throughput model is fitted
online to the placements it ran on, whatever their types (``job.py``, ``h_unaware``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import Field

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import ElasticRange
from tessera.perf.goodput import packed_placement
from tessera.perf.goodput_fit import StepFits, fit_on
from tessera.sched.core.oracle import FlavorRate
from tessera.sched.core.policy import PolicyConfig, PolicyContext, Ranking
from tessera.sched.core.snapshot import JobView
from tessera.sched.elastic.goodput import Config, all_counts_configs, progress_samples
from tessera.sched.elastic.ilp import choose_configs
from tessera.sched.elastic.policy import (
    ConfigSet,
    ElasticMemory,
    ElasticPolicy,
    answer,
    capacity,
)


class PolluxConfig(PolicyConfig):
    """Pollux's knobs, defaults as in its simulator."""

    p: float = Field(-1.0, lt=0, description="Power-mean exponent over speed-ups (< 0).")
    restart_s: float = Field(30.0, ge=0, description="Restart delay its damping assumes (s).")
    max_gpus: int = Field(64, ge=1, description="Most GPUs one job may be given (and never more "
                          "than the smallest flavor holds).")
    mip_rel_gap: float = Field(1e-4, ge=0, description="HiGHS' relative MIP gap.")
    time_limit_s: float = Field(10.0, gt=0, description="HiGHS' time limit per round (s).")
    explore: bool = Field(
        True, description="Cap a job at twice the most GPUs it has run on (Pollux's simulator: "
        "its throughput model is fitted to the placements it has run on).")


EPS = 1e-3
"""Pollux's offset on speed-ups inside the power mean (a job without GPUs counts this)."""


def power_term(speedup: float, p: float) -> float:
    """A job's term ``(speedup + ε)^p`` in Pollux's power-mean fitness."""
    return (speedup + EPS) ** p


def pollux_factor(age_s: float, restarts: int, restart_s: float) -> float:
    """Pollux's re-allocation factor ``max(age − restarts × restart_s, 0) / (age + restart_s)``:
    the share of its life a job would have spent making progress, had it paid one more restart
    on top of those it paid (1 if both times are 0)."""
    if age_s + restart_s <= 0:
        return 1.0
    return max(age_s - restarts * restart_s, 0.0) / (age_s + restart_s)


def pollux_damped(values: list[tuple[int, float]], current: int | None, factor: float,
                  ) -> list[tuple[int, float]]:
    """``values`` with every configuration but ``current`` (``None``: a waiting job's, so all of
    them) times ``factor``."""
    return [(c, x if c == current else x * factor) for c, x in values]


def fitness(speedups: list[float], p: float) -> float:
    """Pollux's power mean ``(Σ (s + ε)^p / n)^(1/p)`` over jobs' (scaled) speed-ups."""
    return (sum(power_term(s, p) for s in speedups) / len(speedups)) ** (1.0 / p)


@dataclass(slots=True)
class _Rows:
    """Pollux's memo of :meth:`Pollux._blind_row`, valid for one tuple of base configurations
    (kept in the driver's policy caches, :meth:`PolicyContext.cache`)."""

    configs: tuple[Config, ...] = ()
    rows: dict[tuple[ElasticRange, tuple[GpuFlavor, ...], int, tuple[float, ...], StepFits],
               tuple[dict[int, float], tuple[tuple[int, float, float], ...]]] = field(
        default_factory=dict)


class Pollux(ElasticPolicy):
    Config = PolluxConfig

    def rank(self, ctx: PolicyContext) -> Ranking:
        cfg = self.config
        assert isinstance(cfg, PolluxConfig)
        snap = ctx.snapshot
        nodes = snap.up_nodes()
        cap = capacity(nodes)
        total = sum(cap.values())
        most_gpus = min([cfg.max_gpus, *cap.values()])
        sets = ConfigSet(all_counts_configs(nodes, most_gpus), nodes)
        memory = ElasticMemory.of(snap.policy_state)
        fair = math.ceil(total / max(len(snap.jobs), 1))
        scale = 1 / min(n.gpus for n in nodes) if nodes else 0.0
        floor = power_term(0.0, cfg.p)
        values: list[list[tuple[int, float]]] = []
        batches: dict[tuple[int, int], float] = {}
        rows: _Rows = ctx.cache(self, "blind_rows", _Rows)
        for j, v in enumerate(snap.jobs):
            most = memory.explored_max(v) if cfg.explore else 1 << 30
            rates = ctx.oracle.rates(v.spec) if v.spec.elastic is None else ()
            speedups = self._speedups(sets, v, j, fair, most, snap.now_s, rates, batches, rows)
            speedups = pollux_damped(speedups, sets.current(v), pollux_factor(
                snap.now_s - v.spec.submit_time_s, memory.restarts.get(v.spec.job_id, 0),
                cfg.restart_s))
            values.append([(c, floor - power_term(s * scale, cfg.p)) for c, s in speedups])
        choices = choose_configs(values, sets.configs, cap, None, cfg.mip_rel_gap,
                                 cfg.time_limit_s)
        return answer(snap, sets, choices, batches, memory, "pollux")

    def _speedups(self, sets: ConfigSet, v: JobView, j: int, fair: int, most: int, now_s: float,
                  ctx_rates: tuple[FlavorRate, ...],
                  batches: dict[tuple[int, int], float], rows: _Rows | None = None,
                  ) -> list[tuple[int, float]]:
        """Job ``v``'s type-blind speed-up per configuration (rigid jobs: ``n / fair``); ``rows``
        is the memo to use (``None``: a fresh one)."""
        rows = _Rows() if rows is None else rows
        spec = v.spec
        e = spec.elastic
        if e is None:  # no goodput model: Pollux's linear speed-up at the job's own count
            out = []
            for r in ctx_rates:
                c = sets.rigid(r.flavor, spec.num_gpus)
                if c is not None:
                    out.append((c, spec.num_gpus / fair))
            return out
        progress = progress_samples(v, now_s)
        blind, row = self._blind_row(sets, v, min(e.max_gpus, most), progress, rows)
        if not blind:
            return []
        at_fair = self._blind_row(sets, v, min(e.max_gpus, max(most, fair)), progress, rows)[0]
        base = at_fair[max((n for n in at_fair if n <= fair), default=min(at_fair))]
        out = []
        for c, g, b in row:
            out.append((c, g / base))
            batches[(j, c)] = b
        return out

    def _blind_row(self, sets: ConfigSet, v: JobView, hi: int, progress: float, rows: _Rows,
                   ) -> tuple[dict[int, float], tuple[tuple[int, float, float], ...]]:
        """Elastic job ``v``'s type-blind goodput per GPU count up to ``hi``, and ``(index,
        goodput, best batch)`` of each base configuration it may take.

        Cached per (range, flavors, ``hi``, epochs under way) for one configuration tuple, as
        :meth:`GoodputModel.row` is: every estimate it is made of depends on progress only
        through those epochs, so the cache is exact."""
        spec = v.spec
        e = spec.elastic
        assert e is not None
        configs = sets.base_configs
        if configs is not rows.configs or len(rows.rows) > 65536:
            rows.rows.clear()
            rows.configs = configs
        gns, fits = v.noise_scale_samples, v.step_fits
        key = (e, spec.flavors, hi, self.model.efficiency_key(e.efficiency_model, progress, gns),
               fits)
        got = rows.rows.get(key)
        if got is not None:
            return got
        blind: dict[int, float] = {}
        batch: dict[tuple[GpuFlavor, int], float] = {}
        per_flavor = _per_node(sets)
        for n in sorted({c.num_gpus for c in configs}):
            if not e.min_gpus <= n <= hi:
                continue
            goods = []
            for fl, per in per_flavor.items():
                est = self.model.estimate(e, fl, packed_placement(n, per), progress, gns,
                                          fit_on(fits, fl))
                if est is not None:
                    goods.append(est.goodput_samples_per_s)
                    batch[(fl, n)] = est.config.global_batch_samples
            if goods:
                blind[n] = sum(goods) / len(goods)
        row = []
        for c, config in enumerate(configs):
            g = blind.get(config.num_gpus)
            b = batch.get((config.flavor, config.num_gpus))
            if g is not None and b is not None and sets.allowed(spec, c):
                row.append((c, g, b))
        got = rows.rows[key] = (blind, tuple(row))
        return got


def _per_node(sets: ConfigSet) -> dict[GpuFlavor, int]:
    """GPUs per server of each flavor among ``sets``' configurations."""
    out: dict[GpuFlavor, int] = {}
    for c in sets.configs[:sets.base]:
        out.setdefault(c.flavor, c.gpus_per_node)
    return out

