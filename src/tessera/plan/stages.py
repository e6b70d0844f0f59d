"""What one pipeline stage costs: every way to run a span of layers on GPUs of one flavor.

A *stage* runs the consecutive layers [i, j) of a model on ``gpus`` GPUs of one flavor. Those
GPUs can be used in three ways at once, and the planner chooses per stage (a
:class:`StageOption`):

* **tensor parallelism** (Megatron-LM): ``tp`` GPUs of one server split every weight matrix of
  the span, so each holds ``1/tp`` of its parameters and does ``1/tp`` of its FLOPs, and they
  all-reduce activations twice forward and twice backward per transformer block over the
  server's GPU link (NVLink or PCIe). Layers that cannot be split (a convolution here) rule it
  out for spans that contain them.
* **data parallelism inside the stage**: ``replicas`` groups of ``tp`` GPUs each take a share of
  every micro-batch and all-reduce the stage's gradients after the step (together with the same
  stage of the other pipeline copies, ``dp_copies``).
* **memory savers**: activation *recomputation* (keep only each layer's input, run the forward
  again during backward: compute × 4/3, plus one layer's activations as working space), and
  **ZeRO** sharding over the stage's N = ``replicas × dp_copies`` data-parallel ranks
  (Rajbhandari et al., SC'20): level 1 shards the optimizer state, 2 also the gradients, 3 also
  the parameters (PyTorch FSDP's full sharding). With mixed precision and Adam a parameter
  costs 2 (weights) + 2 (gradients) + 12 (fp32 master copy and two moments) bytes; per GPU that
  becomes 16, 4 + 12/N, 2 + 14/N and 16/N bytes for levels 0–3. Levels 1 and 2 move the same
  bytes as a plain all-reduce (reduce-scatter then all-gather); level 3 all-gathers the
  parameters again for the backward pass, 1.5 × the all-reduce's traffic.

Per micro-batch a stage takes ``t = compute + hand-off`` (the hand-off sends the span's output
activations to the next stage over the flavor's inter-server link) and, once per step,
``allreduce`` for its gradients. Its memory is model state plus the activations of the
micro-batches it holds in flight, which the pipeline schedule decides (1F1B: stage s of p holds
``min(p − s, M)``): ``mem = state + extra + stash_per_micro_batch × in_flight``. So each option
is summarised, per span, by t, allreduce and ``fmax`` — the most micro-batches in flight that
still fit — and :class:`StageCosts` computes those as (n+1) × (n+1) matrices over spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tessera.errors import SpecError
from tessera.model.cluster import Link
from tessera.model.gpus import GpuFlavor
from tessera.perf.memory import GIB, MemoryBudget

if TYPE_CHECKING:
    from tessera.plan.layers import LayeredModel

# FlavorGroup and PipelineConfig describe a stage's GPUs and batching; they live here, below
# the pipeline search (tessera.plan.pipeline re-exports them), so stages need not import it.

#: Fixed cost of one micro-batch pass through a stage (and of one data-parallel step).
DEFAULT_PASS_OVERHEAD_S = 0.002


@dataclass(frozen=True, slots=True)
class FlavorGroup:
    """The GPUs of one flavor offered to a pipeline.

    Attributes:
        flavor: the flavor.
        count: GPUs available.
        flops_per_s: sustained training FLOP/s of one GPU (from the cost model).
        budget: usable memory per GPU.
        intra_link: link between GPUs of a server (tensor parallelism, rings inside a server).
        inter_link: link between servers (also used for stage hand-offs).
        gpus_per_node: server size (bounds tensor parallelism; decides when a ring leaves it).
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
    """Batching around a pipeline, and which memory savers the search may use.

    Attributes:
        micro_bsz: samples per micro-batch.
        n_micro: micro-batches per step (per pipeline copy).
        dp_copies: identical copies of the pipeline trained data-parallel (hybrid); each
            stage's gradients are synchronised over ``replicas × dp_copies`` ranks.
        overhead_s: fixed cost of one forward+backward pass of a micro-batch through a stage
            (kernel launches, scheduling); an assumption, not a measurement — it is what
            stops the planner from splitting a step into arbitrarily many tiny micro-batches.
        allow_recompute: stages may recompute activations (a per-stage choice).
        zero_levels: ZeRO levels a stage may use (0 = none; see :mod:`tessera.plan.stages`).
        max_tp: largest tensor-parallel degree (1 = no tensor parallelism).
    """

    micro_bsz: int
    n_micro: int
    dp_copies: int = 1
    overhead_s: float = DEFAULT_PASS_OVERHEAD_S
    allow_recompute: bool = True
    zero_levels: tuple[int, ...] = (0, 1, 2, 3)
    max_tp: int = 8

    def __post_init__(self) -> None:
        if self.micro_bsz < 1 or self.n_micro < 1 or self.dp_copies < 1:
            raise SpecError("micro-batch size, micro-batch count and copies must be >= 1")
        if not self.zero_levels or any(z not in (0, 1, 2, 3) for z in self.zero_levels):
            raise SpecError(f"ZeRO levels must be among 0-3, got {self.zero_levels}")
        if self.max_tp < 1:
            raise SpecError("max_tp must be >= 1")


#: Tensor-parallel degrees tried (powers of two within one server).
TP_DEGREES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class StageOption:
    """How a stage uses its GPUs: ``tp × replicas`` GPUs, recomputation, a ZeRO level."""

    tp: int
    replicas: int
    recompute: bool
    zero: int

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage: layers [first_layer, end_layer) on ``gpus`` GPUs of a flavor.

    Attributes:
        flavor: the GPU flavor.
        option: tensor-parallel degree, replicas, recomputation and ZeRO level.
        first_layer: first layer of the span.
        end_layer: one past its last layer.
        in_flight: micro-batches whose activations the stage holds at once (1F1B).
        compute_s: compute per micro-batch (forward and backward, TP all-reduces included).
        p2p_s: hand-off of the span's output to the next stage, per micro-batch.
        allreduce_s: gradient synchronisation once per step.
        mem_gib: memory per GPU.
    """

    flavor: GpuFlavor
    option: StageOption
    first_layer: int
    end_layer: int
    in_flight: int
    compute_s: float
    p2p_s: float
    allreduce_s: float
    mem_gib: float

    @property
    def time_s(self) -> float:
        """Per-micro-batch time: compute plus hand-off to the next stage."""
        return self.compute_s + self.p2p_s

    @property
    def gpus(self) -> int:
        return self.option.gpus

    @property
    def tp(self) -> int:
        return self.option.tp

    @property
    def replicas(self) -> int:
        return self.option.replicas

    @property
    def recompute(self) -> bool:
        return self.option.recompute


@dataclass(frozen=True, slots=True)
class OptionCost:
    """Span matrices of one option on one flavor group (``inf`` time where it cannot run)."""

    option: StageOption
    time_s: np.ndarray
    allreduce_s: np.ndarray
    fixed_bytes: np.ndarray
    stash_bytes_per_micro: np.ndarray
    fmax: np.ndarray


def state_bytes_per_param(total: float, grad: float, zero: int, ranks: int) -> float:
    """Model-state bytes per parameter per GPU under ZeRO ``zero`` over ``ranks`` ranks.

    ``total`` is weights + gradients + optimizer (16 for mixed precision + Adam) and ``grad``
    the bytes of one weight or gradient element (2 in fp16), so the optimizer holds
    ``total − 2·grad``.

    >>> [state_bytes_per_param(16, 2, z, 8) for z in range(4)]
    [16.0, 5.5, 3.75, 2.0]
    """
    optim = total - 2 * grad
    n = float(max(1, ranks))
    if zero <= 0:
        return float(total)
    if zero == 1:
        return 2 * grad + optim / n
    if zero == 2:
        return grad + (grad + optim) / n
    return total / n


def ring_time_s(n_bytes: np.ndarray, workers: int, link: Link, collectives: np.ndarray | float
                ) -> np.ndarray:
    """Ring all-reduce of ``n_bytes`` over ``workers`` ranks, ``collectives`` separate calls."""
    if workers <= 1:
        return np.zeros_like(n_bytes)
    steps = 2 * (workers - 1)
    return (np.asarray(collectives) * steps * link.latency_us * 1e-6
            + steps / workers * n_bytes / (link.bw_gbps * 1e9))


class StageCosts:
    """Cost matrices of every stage option over every span [i, j) of one model.

    Built once per (model, flavor groups, batching); options are computed on first use and
    cached. ``option_cost(g, opt).time_s[i, j]`` is ``inf`` when i ≥ j or when the option
    cannot run the span (tensor parallelism over a layer that cannot be split); memory
    feasibility depends on the micro-batches in flight and is read from ``fmax``.
    """

    def __init__(self, model: LayeredModel, groups: Sequence[FlavorGroup],
                 config: PipelineConfig) -> None:
        self.model = model
        self.groups = tuple(groups)
        self.config = config
        self.n = model.n_layers
        layers = model.layers
        pre = _prefix
        self.fwd = pre([x.fwd_flops for x in layers])
        self.params = pre([x.params for x in layers])
        self.whole = pre([x.stash_kept_whole_bytes for x in layers])
        self.split = pre([x.stash_bytes - x.stash_kept_whole_bytes for x in layers])
        self.inputs = pre([0.0] + [x.out_bytes for x in layers[:-1]])
        self.tp_bytes = pre([x.tp_comm_bytes for x in layers])
        self.tp_calls = pre([float(x.tp_collectives) for x in layers])
        self.no_tp = pre([0.0 if x.tp_ok else 1.0 for x in layers])
        self.out = np.array([0.0] + [x.out_bytes for x in layers])       # out[j]: after j
        stash = np.array([x.stash_bytes for x in layers])
        self.max_layer_stash = np.zeros((self.n + 1, self.n + 1))        # max over [i, j)
        for i in range(self.n):
            self.max_layer_stash[i, i + 1:] = np.maximum.accumulate(stash[i:])
        self.upper = np.triu(np.ones((self.n + 1, self.n + 1), dtype=bool), k=1)
        self._cache: dict[tuple[int, StageOption], OptionCost] = {}
        self._stacked: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def options(self, gi: int, gpus: int) -> list[StageOption]:
        """Options using exactly ``gpus`` GPUs of group ``gi`` (ZeRO levels 0–2 as one: they
        cost the same time, so the planner prices level 2's memory and reports the lowest level
        that fits)."""
        cfg, g = self.config, self.groups[gi]
        out: list[StageOption] = []
        for tp in TP_DEGREES:
            if gpus % tp or tp > min(cfg.max_tp, g.gpus_per_node):
                continue
            ranks = (gpus // tp) * cfg.dp_copies
            low = [z for z in cfg.zero_levels if z <= 2]
            zeros = ([max(low)] if low else []) + ([3] if 3 in cfg.zero_levels else [])
            if ranks == 1:
                zeros = [0]
            for rc in ((False, True) if cfg.allow_recompute else (False,)):
                out += [StageOption(tp, gpus // tp, rc, z) for z in zeros]
        return out

    def stacked(self, gi: int, gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(time, allreduce, fmax) of every option of ``options(gi, gpus)``, stacked."""
        key = (gi, gpus)
        if key not in self._stacked:
            costs = [self.option_cost(gi, o) for o in self.options(gi, gpus)]
            self._stacked[key] = (np.stack([c.time_s for c in costs]),
                                  np.stack([c.allreduce_s for c in costs]),
                                  np.stack([c.fmax for c in costs]))
        return self._stacked[key]

    def option_cost(self, gi: int, opt: StageOption) -> OptionCost:
        key = (gi, opt)
        if key not in self._cache:
            self._cache[key] = self._compute(gi, opt)
        return self._cache[key]

    def _compute(self, gi: int, opt: StageOption) -> OptionCost:
        g, cfg, span = self.groups[gi], self.config, _span
        per_rank = cfg.micro_bsz / opt.replicas            # samples per GPU per micro-batch
        flops = span(self.fwd) * (4.0 if opt.recompute else 3.0)
        compute = flops * per_rank / (g.flops_per_s * opt.tp) + cfg.overhead_s
        if opt.tp > 1:
            factor = 1.5 if opt.recompute else 1.0     # recomputation repeats the forward ones
            compute = compute + factor * ring_time_s(span(self.tp_bytes) * per_rank, opt.tp,
                                                     g.intra_link, span(self.tp_calls))
        p2p_row = np.where(np.arange(self.n + 1) < self.n,
                           g.inter_link.latency_us * 1e-6
                           + self.out * cfg.micro_bsz / (g.inter_link.bw_gbps * 1e9), 0.0)
        time = compute + p2p_row[None, :]
        ok = self.upper & ((span(self.no_tp) == 0) if opt.tp > 1 else True)
        time = np.where(ok, time, np.inf)
        ranks = opt.replicas * cfg.dp_copies
        link = g.intra_link if opt.gpus * cfg.dp_copies <= g.gpus_per_node else min(
            (g.intra_link, g.inter_link), key=lambda lk: lk.bw_gbps)
        grad = span(self.params) / opt.tp * self.model.grad_bytes_per_param
        allreduce = ring_time_s(grad, ranks, link, 1.0) * (1.5 if opt.zero == 3 else 1.0)
        state = span(self.params) / opt.tp * state_bytes_per_param(
            self.model.state_bytes_per_param, self.model.grad_bytes_per_param, opt.zero, ranks)
        if opt.recompute:
            stash = span(self.inputs) * per_rank
            extra = state + self.max_layer_stash * per_rank / opt.tp
        else:
            stash = (span(self.whole) + span(self.split) / opt.tp) * per_rank
            extra = state
        free = g.budget.usable_bytes - extra
        with np.errstate(divide="ignore", invalid="ignore"):
            fmax = np.where(free < 0, -1.0,
                            np.where(stash > 0, np.floor(free / np.where(stash > 0, stash, 1.0)),
                                     np.inf))
        fmax = np.where(ok, fmax, -1.0)
        return OptionCost(opt, time, allreduce, extra, stash, fmax)

    def lowest_zero(self, gi: int, opt: StageOption, i: int, j: int, in_flight: int) -> int:
        """The lowest allowed ZeRO level of ``opt``'s time class that fits (see options)."""
        if opt.zero == 3:
            return 3
        for z in sorted(z for z in self.config.zero_levels if z <= opt.zero):
            probe = StageOption(opt.tp, opt.replicas, opt.recompute, z)
            if self.option_cost(gi, probe).fmax[i, j] >= in_flight:
                return z
        return opt.zero

    def stage(self, gi: int, opt: StageOption, i: int, j: int, in_flight: int) -> Stage:
        """The :class:`Stage` of layers [i, j) under ``opt``, ``in_flight`` micro-batches held."""
        z = self.lowest_zero(gi, opt, i, j, in_flight)
        opt = StageOption(opt.tp, opt.replicas, opt.recompute, z)
        c = self.option_cost(gi, opt)
        compute_s = float(c.time_s[i, j]) - self.p2p_s(gi, j)
        mem = float(c.fixed_bytes[i, j] + c.stash_bytes_per_micro[i, j] * in_flight) / GIB
        return Stage(self.groups[gi].flavor, opt, i, j, in_flight, compute_s, self.p2p_s(gi, j),
                     float(c.allreduce_s[i, j]), mem)

    def p2p_s(self, gi: int, j: int) -> float:
        if j >= self.n:
            return 0.0
        link = self.groups[gi].inter_link
        return float(link.latency_us * 1e-6
                     + self.out[j] * self.config.micro_bsz / (link.bw_gbps * 1e9))


def _prefix(values: Sequence[float]) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float))])


def _span(prefix: np.ndarray) -> np.ndarray:
    """[i, j] = sum over layers i..j−1 of a prefix-summed quantity."""
    return prefix[None, :] - prefix[:, None]
