"""Pipeline partitioning over heterogeneous device groups: an exact search.

**Pipelines.** A model too big for one GPU is cut into *stages* of consecutive layers; stage s
runs on its own GPUs and passes activations to stage s+1. A step's batch is split into M
*micro-batches* that flow through the stages like cars on an assembly line. Under the 1F1B
schedule (PipeDream-Flush, Megatron-LM) with per-micro-batch stage times t_s one step takes::

    T_step = Σ_s t_s + (M − 1) · max_s t_s + max_s A_s

(fill and drain, M − 1 micro-batches at the bottleneck's pace, then each stage's data-parallel
ranks synchronise gradients, A_s). Stage s of p keeps ``min(p − s, M)`` micro-batches of
activations in flight — the first stage the most — and memory is checked with exactly that.

**Search space.** Each stage runs on GPUs of one flavor; the flavors appear along the pipeline
in some order, each as one contiguous run of stages (as in Metis), and any flavor or any GPU may
be left unused. Per stage the planner picks its span, its width (GPUs: 1–8, then powers of two
and multiples of 8) and how it uses them — tensor-parallel degree, replicas, activation
recomputation, ZeRO level (:mod:`tessera.plan.stages`).

**Exact optimum.** ``T_step`` mixes a sum and two maxima, so no single DP minimises it. The
exact DP of :mod:`tessera.plan.pipeline_dp` solves the capped problem — least Σt with every
``t_s ≤ τ`` and ``A_s ≤ α`` — over every flavor order, and the planner walks the caps:

1. seed with the least-Σt plan and the least-bottleneck plan (the same DP with max for +),
   whose values give lower bounds Σt_min and t_min;
2. for a cap τ (first ∞), walk α down the (Σt, max A) front: solve, record the plan, lower α
   below its largest sync time, until nothing fits or ``Σt + (M−1)·T`` of the plan just found
   (T: the largest bottleneck seen at this τ) reaches the best step time — every plan left in
   this walk has no smaller Σt and, if its bottleneck is below T, is met at a later τ;
3. lower τ below the largest bottleneck seen and below ``(best − Σt_τ)/(M − 1)`` (no plan with
   a larger bottleneck can win any more), and repeat until ``Σt_τ + (M−1)·t_min ≥ best``.

Every plan is dominated, in all three terms, by some plan the walk solved, so the best plan
found is the optimum of the search space. Flavor orders whose own ``Σt_min + (M−1)·t_min``
cannot beat the best are skipped. Flavors are sorted by name first, so the answer does not
depend on the order devices were listed in; and since offering more GPUs only adds choices, it
never gets slower with more devices. :mod:`tessera.plan.exhaustive` enumerates the same space
for tests.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.memory import GIB
from tessera.plan.layers import LayeredModel
from tessera.plan.order_search import OrderSearch
from tessera.plan.stages import DEFAULT_PASS_OVERHEAD_S as DEFAULT_PASS_OVERHEAD_S
from tessera.plan.stages import FlavorGroup as FlavorGroup
from tessera.plan.stages import PipelineConfig as PipelineConfig
from tessera.plan.stages import Stage, StageCosts

#: Most flavors one pipeline plan may mix (the search tries all their orders: 6! = 720).
MAX_FLAVORS = 6


@dataclass(frozen=True, slots=True)
class PipelinePlan:
    """A partition of a model into stages, with its predicted step time.

    ``dp_rounds`` counts the DP rounds (cap settings) the search ran, for benchmarks.
    """

    model: str
    stages: tuple[Stage, ...]
    config: PipelineConfig
    dp_rounds: int = 0

    @property
    def step_time_s(self) -> float:
        return step_time_s(self.stages, self.config.n_micro)

    @property
    def bottleneck_s(self) -> float:
        return max(s.time_s for s in self.stages)

    @property
    def samples_per_step(self) -> int:
        return self.config.micro_bsz * self.config.n_micro * self.config.dp_copies

    def gpus_used(self, flavor: GpuFlavor) -> int:
        """GPUs of ``flavor`` one pipeline copy uses."""
        return sum(s.gpus for s in self.stages if s.flavor == flavor)


def step_time_s(stages: Sequence[Stage], n_micro: int) -> float:
    """``Σ t_s + (M−1)·max t_s + max A_s`` (see the module docstring)."""
    times = [s.time_s for s in stages]
    return sum(times) + (n_micro - 1) * max(times) + max(s.allreduce_s for s in stages)


def canonical_groups(groups: Sequence[FlavorGroup]) -> list[FlavorGroup]:
    """Non-empty groups sorted by flavor name (the planner's answer is order-independent)."""
    return sorted((g for g in groups if g.count > 0), key=lambda g: g.flavor.name)


def plan_pipeline(model: LayeredModel, groups: Sequence[FlavorGroup],
                  config: PipelineConfig) -> PipelinePlan:
    """The step-time-optimal pipeline of ``model`` over ``groups`` (see the module docstring).

    Raises:
        SpecError: no partition fits in memory (the message says by how much and what would).
    """
    plan = search_pipeline(model, groups, config)
    assert plan is not None              # without a bound to beat, search_pipeline finds one
    return plan


def search_pipeline(model: LayeredModel, groups: Sequence[FlavorGroup],
                    config: PipelineConfig, beat_s: float = math.inf) -> PipelinePlan | None:
    """The optimal pipeline if its step time is below ``beat_s``, else ``None``.

    ``beat_s`` lets a caller comparing many settings (the hybrid search) skip work that cannot
    win: the walk starts with it as the best step time found.

    Raises:
        SpecError: no partition fits in memory.
    """
    return walk_search(prepare_search(model, groups, config), beat_s)


@dataclass
class PreparedSearch:
    """One model × groups × config after its first, bounding rounds.

    Its lower bound tightens in stages, each a DP round, so that a caller comparing many
    settings (the hybrid search) pays for a tight bound only where a loose one does not
    already rule the setting out: first ``Σt_min + (M − 1)·t_bal`` (t_bal: the per-micro-batch
    time of a perfectly balanced pipeline, which no bottleneck beats), then, after
    :meth:`tighten`, ``Σt_min + (M − 1)·W`` with W the least ``max_s (t_s + A_s/(M − 1))`` of
    any plan (for every plan ``(M − 1)·W ≤ (M − 1)·max t + max A``).

    Attributes:
        model_name: the model planned.
        search: the DP state (stage prices, per-order bounds, rounds run so far).
        least_sum_s: the least Σt of any plan.
        balanced_s: t_bal, a lower bound on every plan's bottleneck.
        least_weighted_s: W once :meth:`tighten` ran, else ``None``.
        first_plans: the plans of the bounding rounds (they fit; the walk's first incumbents).
    """

    model_name: str
    search: OrderSearch
    least_sum_s: float
    balanced_s: float
    first_plans: list[tuple[Stage, ...]]
    least_weighted_s: float | None = None

    @property
    def config(self) -> PipelineConfig:
        return self.search.sc.config

    @property
    def lower_bound_s(self) -> float:
        """No plan of this setting is faster (the tightest bound computed so far)."""
        w = self.balanced_s if self.least_weighted_s is None else max(
            self.least_weighted_s, self.balanced_s)
        return self.least_sum_s + (self.config.n_micro - 1) * w

    def tighten(self, beat_s: float = math.inf) -> bool:
        """Run the next bounding round; ``False`` when the bound is already the tightest.

        Flavor orders that cannot beat ``beat_s`` (their own ``Σt_min + (M − 1)·t_bal``) are
        left out of the round, and out of every later one; if all are, no plan of this
        setting beats ``beat_s`` and the bound becomes infinite. So pass only a step time
        some plan already achieves (the search's incumbent only improves).
        """
        if self.least_weighted_s is not None:
            return False
        weighted = self.search.solve(math.inf, math.inf, bottleneck=True, best_step_s=beat_s,
                                     sync_weight=1.0 / max(self.config.n_micro - 1, 1))
        if weighted is None:
            self.least_weighted_s = math.inf
            return True
        self.least_weighted_s = weighted.sum_time_s
        self.first_plans.append(weighted.stages)
        return True


def balanced_time_s(model: LayeredModel, groups: Sequence[FlavorGroup],
                    config: PipelineConfig) -> float:
    """A lower bound on any pipeline's bottleneck ``max_s t_s``.

    A stage's time is at least the fixed pass cost plus its work over its GPUs' FLOP/s, and
    the bottleneck is at least the rate-weighted mean of the stage times, so at least the pass
    cost plus one micro-batch's work over all offered FLOP/s.
    """
    rate = sum(g.count * g.flops_per_s for g in groups)
    if rate <= 0:
        return math.inf
    return config.overhead_s + config.micro_bsz * model.train_flops_per_sample / rate


def prepare_search(model: LayeredModel, groups: Sequence[FlavorGroup],
                   config: PipelineConfig) -> PreparedSearch:
    """Run the round that bounds a setting loosely (see :class:`PreparedSearch`): uncapped,
    it gives the least Σt of any plan and one plan that fits.

    Raises:
        SpecError: no partition fits in memory.
    """
    groups = canonical_groups(groups)
    if not groups:
        raise SpecError("no devices to plan a pipeline over")
    if len(groups) > MAX_FLAVORS:
        raise SpecError(f"at most {MAX_FLAVORS} GPU flavors in one pipeline plan (the search "
                        f"tries every order of them), got {len(groups)}")
    if model.n_layers >= 4096 or any(g.count >= 4096 for g in groups):
        raise SpecError("the pipeline search handles fewer than 4096 layers and 4096 GPUs of "
                        "a flavor per copy; coarsen the model or plan more copies")
    search = OrderSearch(StageCosts(model, groups, config))
    unconstrained = search.solve(math.inf, math.inf)
    if unconstrained is None:
        raise SpecError(no_fit_message(model, groups, config))
    search.floor_t_s = balanced_time_s(model, groups, config)
    return PreparedSearch(model.name, search, unconstrained.sum_time_s, search.floor_t_s,
                          [unconstrained.stages])


def _seed(prep: PreparedSearch) -> tuple[float, tuple[Stage, ...]]:
    """The best of the bounding rounds' plans, a plan minimising ``max_s ((M−1)·t_s + A_s)``
    (the step time's two maxima priced stage by stage) and the polish of the best of them (the
    least Σt among plans with no larger bottleneck and sync, so no slower). Only a first
    incumbent: the walk's exactness does not depend on it, but a good one cuts the walk short.
    """
    search, m = prep.search, prep.config.n_micro
    best = min(prep.first_plans, key=lambda st: step_time_s(st, m))
    polished = search.solve(max(s.time_s for s in best), max(s.allreduce_s for s in best))
    if polished is not None and step_time_s(polished.stages, m) < step_time_s(best, m):
        best = polished.stages
    return step_time_s(best, m), best


def walk_search(prep: PreparedSearch, beat_s: float = math.inf) -> PipelinePlan | None:
    """The optimal plan of a prepared setting if it is faster than ``beat_s``, else ``None``.

    The walk of the module docstring, started with the better of ``beat_s`` and the seeds,
    and — to find a near-optimal incumbent before the walk from τ = ∞ — one α walk at the
    seed's own bottleneck (its rounds are reused by the main walk where they answer it).
    """
    search, config = prep.search, prep.config
    m1 = config.n_micro - 1
    prep.tighten(beat_s)
    if prep.lower_bound_s >= beat_s:
        return None
    least_bottleneck = search.solve(math.inf, math.inf, bottleneck=True, best_step_s=beat_s)
    if least_bottleneck is None or prep.least_weighted_s is None:
        return None                  # every flavor order is bounded out
    prep.first_plans.append(least_bottleneck.stages)
    t_lb, w_lb = least_bottleneck.sum_time_s, max(prep.least_weighted_s, prep.balanced_s)
    walk = _AlphaWalk(search, *search.candidates()[1:], t_lb, beat_s)
    seed_step_s, seed_stages = _seed(prep)
    walk.consider(seed_step_s, seed_stages)
    walk.run(max(s.time_s for s in seed_stages))
    taus = search.candidates()[0]
    tau = math.inf
    while True:                      # τ walks down the (Σt, max t) front
        first_sum, max_t = walk.run(tau)
        if not math.isfinite(first_sum) or first_sum + m1 * w_lb >= walk.best_s:
            break
        # next τ: below this level's bottlenecks, and low enough to beat the best with Σt ≥ now
        below = bisect.bisect_left(
            taus, min(max_t, (walk.best_s - first_sum) / max(m1, 1e-300))) - 1
        if below < 0:
            break
        tau = taus[below]
    if walk.best_stages is None:
        return None
    return PipelinePlan(prep.model_name, walk.best_stages, config, search.rounds)


class _AlphaWalk:
    """The inner walk of the search: α down the (Σt, max A) front under one τ, keeping the
    best plan found over all walks."""

    def __init__(self, search: OrderSearch, alphas: list[float], t_lb: float, beat_s: float
                 ) -> None:
        self.search, self.alphas, self.t_lb = search, alphas, t_lb
        self.best_s = beat_s
        self.best_stages: tuple[Stage, ...] | None = None

    def consider(self, step_s: float, stages: tuple[Stage, ...]) -> None:
        if step_s < self.best_s:
            self.best_s, self.best_stages = step_s, stages

    def run(self, tau: float) -> tuple[float, float]:
        """Walk α under ``tau``; the least Σt met and the largest bottleneck of its plans."""
        m = self.search.sc.config.n_micro
        alpha, first_sum, max_t = math.inf, math.inf, 0.0
        while True:
            r = self.search.solve(tau, alpha, best_step_s=self.best_s)
            if r is None:
                break
            first_sum = min(first_sum, r.sum_time_s)
            max_t = max(max_t, max(s.time_s for s in r.stages))
            self.consider(step_time_s(r.stages, m), r.stages)
            if r.sum_time_s + (m - 1) * max_t >= self.best_s:
                break                # see the module docstring: plans with max t < max_t are
                                     # the next τ's; the rest have Σt ≥ r's and max t ≥ max_t
            # next α: below r's sync time, and low enough that Σt ≥ r's could still win
            cap = min(max(s.allreduce_s for s in r.stages),
                      self.best_s - r.sum_time_s - (m - 1) * self.t_lb)
            below = bisect.bisect_left(self.alphas, cap) - 1
            if below < 0:
                break
            alpha = self.alphas[below]
        return first_sum, max_t


def no_fit_message(model: LayeredModel, groups: Sequence[FlavorGroup],
                   config: PipelineConfig) -> str:
    """Why nothing fits, on one line: memory short by how much, and what would help.

    The training state (weights, gradients, optimizer) must be held somewhere whatever the
    plan — ZeRO and tensor parallelism only spread it — so when it exceeds the devices' usable
    memory the message names the shortfall and how many more of the offered GPU with the
    most memory would cover it; otherwise some stage cannot fit on its GPUs, and the message
    lists the memory savers this search was not allowed to use.
    """
    usable = sum(g.budget.usable_bytes * g.count for g in groups)
    state = model.params * model.state_bytes_per_param
    head = (f"{model.name} does not fit on these devices with micro-batch {config.micro_bsz}: "
            f"its training state alone needs {state / GIB:.1f} GiB "
            f"({model.state_bytes_per_param:g} B/parameter), the devices offer "
            f"{usable / GIB:.1f} GiB usable in total")
    if state > usable:
        big = max(groups, key=lambda g: g.budget.usable_bytes)
        more = math.ceil((state - usable) / big.budget.usable_bytes)
        return (f"{head}; short by {(state - usable) / GIB:.1f} GiB before any activations: "
                f"add at least {more} more {big.flavor.short} "
                f"({big.budget.usable_bytes / GIB:.1f} GiB usable each) or other GPUs with as "
                "much memory (ZeRO, recomputation and tensor parallelism only spread the "
                "state, they do not shrink it)")
    helps = []
    if 3 not in config.zero_levels:
        helps.append("ZeRO-3 sharding")
    if not config.allow_recompute:
        helps.append("activation recomputation")
    if config.max_tp < 8:
        helps.append("tensor parallelism")
    if config.micro_bsz > 1:
        helps.append("a smaller micro-batch")
    helps.append("more or larger GPUs")
    return (f"{head}; no partition keeps every stage within its GPU's memory; what could "
            f"help: {', '.join(helps)}")
