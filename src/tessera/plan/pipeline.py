"""Pipeline partitioning over heterogeneous device groups (PipeDream's DP, extended).

**Pipelines.** A model too big for one GPU is cut into *stages* of consecutive layers; stage s
runs on its own GPUs and passes activations to stage s+1. A step's batch is split into M
*micro-batches* that flow through the stages like cars on an assembly line, so in steady state
the pipeline moves at the pace of its **slowest stage** (the bottleneck). With per-micro-batch
stage times t_s (compute plus hand-off), one step of M micro-batches takes about::

    T_step = Σ_s t_s + (M − 1) · max_s t_s + max_s allreduce_s

(fill and drain, then M−1 micro-batches at the bottleneck's pace; then the stage replicas
all-reduce their gradients). A stage may be *replicated* on d GPUs of one flavor, which split
each micro-batch and all-reduce that stage's gradients.

**PipeDream's dynamic programme** (Narayanan et al., SOSP'19) finds the partition minimising the
bottleneck: the best way to run layers [0, j) with some devices is the best over the last
stage [i, j) of ``max(best(0..i, remaining devices), time(stage i..j))``.

**Heterogeneous extension.** Devices come in flavor groups (8 × A100, 16 × T4 …). Each stage
uses one flavor. Following Metis, the flavors appear along the pipeline in some order, each as
one contiguous run of stages, and the planner tries every order (K! for K flavors; a flavor may
be skipped). For one order the state is ``(layers placed j, current flavor, GPUs of it left r)``,
and the transition adds a stage [i, j) on d of those r GPUs — vectorised over i and j with
numpy. A stage must fit in memory: its parameters' training state plus the activations stashed
for the micro-batches in flight (1F1B keeps at most p micro-batches per stage with p stages; we
charge ``min(M, N)`` with N the device count, an upper bound on p). With activation
recomputation a stage keeps only each layer's input and pays one more forward pass.
Replication d ranges over 1…r for r ≤ 8 and powers of two (and r) beyond.

The DP objective is the per-micro-batch bottleneck ``t_s + allreduce_s / M``. When M is small,
fill and drain (Σ t_s) matter too, so the planner also runs the same DP as a min-sum of stage
times under bottleneck caps τ = (1.05 … 2) × the optimum (for the two flavor orders with the
best bottlenecks), and keeps whichever plan has the smallest step time by the formula above.
:mod:`tessera.plan.exhaustive` enumerates the same space for tests. Cost: O(K! · K · Σ_r |D(r)|
· L²) array work: 4 flavors × 16 GPUs and 100 layers take about a second or two per setting.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.errors import SpecError
from tessera.model.cluster import Link
from tessera.model.gpus import GpuFlavor
from tessera.perf.memory import GIB, MemoryBudget
from tessera.plan.models import LayeredModel

#: Fixed cost of one micro-batch pass through a stage (and of one data-parallel step).
DEFAULT_PASS_OVERHEAD_S = 0.002


#: When fill and drain (Σ t_s) exceed this share of the step, also search plans with a
#: bottleneck up to TAU_FACTORS × the optimum that minimise Σ t_s.
FILL_DRAIN_SHARE = 0.05
TAU_FACTORS = (1.05, 1.1, 1.25, 1.5, 2.0)
#: ... for the flavor orders with the best bottlenecks only.
TAU_ORDERS = 2


@dataclass(frozen=True, slots=True)
class FlavorGroup:
    """The GPUs of one flavor offered to a pipeline.

    Attributes:
        flavor: the flavor.
        count: GPUs available.
        flops_per_s: sustained training FLOP/s of one GPU (from the cost model).
        budget: usable memory per GPU.
        intra_link: link between GPUs of a server.
        inter_link: link between servers (also used for stage hand-offs).
        gpus_per_node: server size (decides when a stage's ring leaves a server).
    """

    flavor: GpuFlavor
    count: int
    flops_per_s: float
    budget: MemoryBudget
    intra_link: Link
    inter_link: Link
    gpus_per_node: int


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """Batching around a pipeline.

    Attributes:
        micro_bsz: samples per micro-batch.
        n_micro: micro-batches per step (per pipeline copy).
        dp_copies: identical copies of the pipeline trained data-parallel (hybrid); each
            stage's gradients are all-reduced over ``replicas × dp_copies`` GPUs.
        recompute: activation recomputation: keep only each layer's input and run the
            forward pass again during backward (compute × 4/3, far less stash).
        overhead_s: fixed cost of one forward+backward pass of a micro-batch through a stage
            (kernel launches, scheduling); an assumption, not a measurement — it is what
            stops the planner from splitting a step into arbitrarily many tiny micro-batches.
    """

    micro_bsz: int
    n_micro: int
    dp_copies: int = 1
    recompute: bool = False
    overhead_s: float = DEFAULT_PASS_OVERHEAD_S


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage: layers [first_layer, end_layer) on ``replicas`` GPUs of a flavor."""

    flavor: GpuFlavor
    replicas: int
    first_layer: int
    end_layer: int
    compute_s: float
    p2p_s: float
    allreduce_s: float
    mem_gib: float

    @property
    def time_s(self) -> float:
        """Per-micro-batch time: compute plus hand-off to the next stage."""
        return self.compute_s + self.p2p_s


@dataclass(frozen=True, slots=True)
class PipelinePlan:
    """A partition of a model into stages, with its predicted step time."""

    model: str
    stages: tuple[Stage, ...]
    config: PipelineConfig
    bottleneck_s: float
    best_bottleneck_s: float

    @property
    def step_time_s(self) -> float:
        return step_time_s(self.stages, self.config.n_micro)

    @property
    def samples_per_step(self) -> int:
        return self.config.micro_bsz * self.config.n_micro * self.config.dp_copies


def step_time_s(stages: Sequence[Stage], n_micro: int) -> float:
    """``Σ t_s + (M−1)·max t_s + max allreduce_s`` (see the module docstring)."""
    times = [s.time_s for s in stages]
    return sum(times) + (n_micro - 1) * max(times) + max(s.allreduce_s for s in stages)


def replica_choices(remaining: int) -> tuple[int, ...]:
    """Replication degrees tried for a stage when ``remaining`` GPUs of a flavor are left."""
    if remaining <= 8:
        return tuple(range(1, remaining + 1))
    pow2 = tuple(2**e for e in range(int(math.log2(remaining)) + 1))
    return pow2 if pow2[-1] == remaining else (*pow2, remaining)


class StageCosts:
    """Per-(flavor group, replicas) matrices over stage spans [i, j) of one model.

    ``objective(g, d)[i, j]`` is the DP's per-micro-batch cost of layers [i, j) on d GPUs of
    group g (``inf`` when i ≥ j or the stage does not fit in memory).
    """

    def __init__(self, model: LayeredModel, groups: Sequence[FlavorGroup],
                 config: PipelineConfig) -> None:
        if config.micro_bsz < 1 or config.n_micro < 1 or config.dp_copies < 1:
            raise SpecError("micro-batch size, micro-batch count and copies must be >= 1")
        self.model = model
        self.groups = tuple(groups)
        self.config = config
        self.n = model.n_layers
        self.flops = np.array(model.prefix("fwd_flops")) * (4.0 if config.recompute else 3.0)
        self.params = np.array(model.prefix("params"))
        self.out = np.array([0.0] + [x.out_bytes for x in model.layers])   # out[j]: after j
        # stash: every activation, or (recomputing) each layer's input only
        self.stash = (np.concatenate([[0.0], np.cumsum(self.out[:-1])]) if config.recompute
                      else np.array(model.prefix("stash_bytes")))
        self.in_flight = min(config.n_micro, sum(g.count for g in groups))
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def _span(self, prefix: np.ndarray) -> np.ndarray:
        return prefix[None, :] - prefix[:, None]          # [i, j] = sum over layers i..j-1

    def ring_link(self, g: FlavorGroup, workers: int) -> Link:
        if workers <= g.gpus_per_node:
            return g.intra_link
        return min((g.intra_link, g.inter_link), key=lambda lk: lk.bw_gbps)

    def parts(self, gi: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(compute_s, p2p_s, allreduce_s, mem_bytes) matrices for d GPUs of group gi."""
        g, cfg = self.groups[gi], self.config
        mb = float(cfg.micro_bsz)
        compute = self._span(self.flops) * mb / (g.flops_per_s * d) + cfg.overhead_s
        p2p_row = np.where(
            np.arange(self.n + 1) < self.n,
            g.inter_link.latency_us * 1e-6 + self.out * mb / (g.inter_link.bw_gbps * 1e9), 0.0)
        p2p = np.broadcast_to(p2p_row[None, :], compute.shape)
        workers = d * cfg.dp_copies
        grad_bytes = self._span(self.params) * self.model.grad_bytes_per_param
        if workers > 1:
            link = self.ring_link(g, workers)
            steps = 2 * (workers - 1)
            allreduce = (steps * link.latency_us * 1e-6
                         + steps / workers * grad_bytes / (link.bw_gbps * 1e9))
        else:
            allreduce = np.zeros_like(grad_bytes)
        mem = (self._span(self.params) * self.model.state_bytes_per_param
               + self._span(self.stash) * (mb / d) * self.in_flight)
        return compute, p2p, allreduce, mem

    def objective(self, gi: int, d: int) -> np.ndarray:
        key = (gi, d)
        if key not in self._cache:
            compute, p2p, allreduce, mem = self.parts(gi, d)
            obj = compute + p2p + allreduce / self.config.n_micro
            bad = (mem > self.groups[gi].budget.usable_bytes) | ~np.triu(
                np.ones_like(obj, dtype=bool), k=1)
            self._cache[key] = np.where(bad, np.inf, obj)
        return self._cache[key]

    def capped_time(self, gi: int, d: int, tau_s: float) -> np.ndarray:
        """Per-micro-batch stage time t_s where the DP objective is at most ``tau_s``."""
        obj = self.objective(gi, d)
        compute, p2p, _, _ = self.parts(gi, d)
        return np.where(obj <= tau_s, compute + p2p, np.inf)

    def stage(self, gi: int, d: int, i: int, j: int) -> Stage:
        compute, p2p, allreduce, mem = self.parts(gi, d)
        return Stage(self.groups[gi].flavor, d, i, j, float(compute[i, j]),
                     float(p2p[i, j]), float(allreduce[i, j]), float(mem[i, j]) / GIB)


@dataclass(slots=True)
class _OrderTables:
    """DP tables for one flavor at one position of an order."""

    group: int
    cost: np.ndarray        # [r, j]: best bottleneck with r GPUs of this flavor left
    par_r: np.ndarray
    par_d: np.ndarray
    par_i: np.ndarray
    entry_src: list[tuple[int, int]]    # per j: (position, r) that the entry state came from


def _solve_order(sc: StageCosts, order: Sequence[int], tau_s: float | None = None
                 ) -> tuple[float, list[Stage]]:
    """Best stages for one flavor order (flavors may be skipped).

    With ``tau_s`` None, minimises the bottleneck (max of the DP objective); otherwise
    minimises the sum of stage times among stages whose objective stays within ``tau_s``.
    """
    combine = np.maximum if tau_s is None else np.add
    n = sc.n
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    best_src: list[tuple[int, int]] = [(-1, -1)] * (n + 1)
    tables: list[_OrderTables] = []
    for pos, gi in enumerate(order):
        cnt = sc.groups[gi].count
        cost = np.full((cnt + 1, n + 1), np.inf)
        cost[cnt] = best
        par = [np.full((cnt + 1, n + 1), -1, dtype=np.int64) for _ in range(3)]
        for r in range(cnt, 0, -1):
            row = cost[r]
            if not np.isfinite(row).any():
                continue
            for d in replica_choices(r):
                step = sc.objective(gi, d) if tau_s is None else sc.capped_time(gi, d, tau_s)
                cand = combine(row[:, None], step)
                arg = cand.argmin(axis=0)
                val = cand[arg, np.arange(n + 1)]
                better = val < cost[r - d]
                if better.any():
                    cost[r - d][better] = val[better]
                    par[0][r - d][better] = r
                    par[1][r - d][better] = d
                    par[2][r - d][better] = arg[better]
        tables.append(_OrderTables(gi, cost, par[0], par[1], par[2], list(best_src)))
        for r in range(cnt):
            better = cost[r] < best
            for jj in np.nonzero(better)[0].tolist():
                best_src[jj] = (pos, r)
            best = np.minimum(best, cost[r])
    if not np.isfinite(best[n]):
        return math.inf, []
    stages: list[Stage] = []
    pos, r = best_src[n]
    j = n
    while j > 0:
        t = tables[pos]
        if r == sc.groups[t.group].count:          # entry state: jump to the earlier flavor
            pos, r = t.entry_src[j]
            continue
        r_src, d, i = int(t.par_r[r, j]), int(t.par_d[r, j]), int(t.par_i[r, j])
        stages.append(sc.stage(t.group, d, i, j))
        r, j = r_src, i
    return float(best[n]), stages[::-1]


def plan_pipeline(model: LayeredModel, groups: Sequence[FlavorGroup],
                  config: PipelineConfig) -> PipelinePlan:
    """The bottleneck-optimal pipeline of ``model`` over ``groups`` (see the module docstring).

    Raises:
        SpecError: no flavor order admits a memory-feasible partition.
    """
    groups = [g for g in groups if g.count > 0]
    if not groups:
        raise SpecError("no devices to plan a pipeline over")
    sc = StageCosts(model, groups, config)
    orders = list(itertools.permutations(range(len(groups))))
    best: tuple[float, list[Stage]] = (math.inf, [])
    ranked: list[tuple[float, tuple[int, ...]]] = []
    for order in orders:
        val, stages = _solve_order(sc, order)
        ranked.append((val, order))
        if val < best[0]:
            best = (val, stages)
    if not best[1]:
        raise SpecError(
            f"{model.name} does not fit on these devices with micro-batch {config.micro_bsz}: "
            f"no partition of its {model.n_layers} layers keeps every stage within memory "
            f"(model state alone needs {model.params * model.state_bytes_per_param / GIB:.1f} "
            "GiB in total)"
        )
    chosen = best[1]
    fill_drain = sum(x.time_s for x in chosen)
    if fill_drain > FILL_DRAIN_SHARE * step_time_s(chosen, config.n_micro):
        promising = [o for v, o in sorted(ranked)[:TAU_ORDERS] if math.isfinite(v)]
        for factor in TAU_FACTORS:   # trade a slightly slower bottleneck for fewer stages
            for order in promising:
                _, stages = _solve_order(sc, order, best[0] * factor)
                if stages and (step_time_s(stages, config.n_micro)
                               < step_time_s(chosen, config.n_micro)):
                    chosen = stages
    return PipelinePlan(model.name, tuple(chosen), config, _bottleneck(chosen, config), best[0])


def _bottleneck(stages: Sequence[Stage], config: PipelineConfig) -> float:
    return max(s.time_s + s.allreduce_s / config.n_micro for s in stages)
