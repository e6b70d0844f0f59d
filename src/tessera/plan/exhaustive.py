"""Exhaustive reference planners, for tests and benchmarks on small cases.

They enumerate every plan in the same search space as the fast planners — every partition of
the layers into stages, every flavor, width and stage option (tensor parallelism, replicas,
recomputation, ZeRO) per stage with each flavor's stages contiguous, every pipeline copy count
and micro-batch size — check each stage's memory with the micro-batches the 1F1B schedule
leaves in flight at its position, and score each plan's step time directly. They share only
the per-stage prices (:class:`~tessera.plan.stages.StageCosts`) with the planner, not its
search. They are exponential; use them only where the layers and devices are few.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

from tessera.model.gpus import GpuFlavor
from tessera.perf.steptime import CostModel
from tessera.plan.hybrid import flavor_groups, pipeline_configs, plan_data_parallel_layered
from tessera.plan.layers import LayeredModel
from tessera.plan.pipeline import FlavorGroup, PipelineConfig, canonical_groups, step_time_s
from tessera.plan.pipeline_dp import widths_up_to
from tessera.plan.stages import Stage, StageCosts, StageOption

_Choice = tuple[int, StageOption, int, int]          # (group, option, first layer, end layer)


def enumerate_pipelines(sc: StageCosts) -> Iterator[list[Stage]]:
    """Every memory-feasible pipeline in the planner's search space."""
    n_groups = len(sc.groups)

    def walk(i: int, current: int, closed: frozenset[int], left: list[int],
             acc: list[_Choice]) -> Iterator[list[_Choice]]:
        if i == sc.n:
            yield list(acc)
            return
        for gi in range(n_groups):
            if gi in closed:
                continue
            next_closed = closed if gi == current or current < 0 else closed | {current}
            for w in widths_up_to(left[gi]):
                for opt in sc.options(gi, w):
                    c = sc.option_cost(gi, opt)
                    for j in range(i + 1, sc.n + 1):
                        if not math.isfinite(c.time_s[i, j]) or c.fmax[i, j] < 1:
                            continue
                        left[gi] -= w
                        acc.append((gi, opt, i, j))
                        yield from walk(j, gi, next_closed, left, acc)
                        acc.pop()
                        left[gi] += w

    m = sc.config.n_micro
    for choices in walk(0, -1, frozenset(), [g.count for g in sc.groups], []):
        p = len(choices)
        if all(sc.option_cost(gi, opt).fmax[i, j] >= min(p - s, m)
               for s, (gi, opt, i, j) in enumerate(choices)):
            yield [sc.stage(gi, opt, i, j, min(p - s, m))
                   for s, (gi, opt, i, j) in enumerate(choices)]


def best_pipeline_step_s(sc: StageCosts) -> float:
    """Smallest step time over every pipeline (``inf`` when none fits)."""
    return min((step_time_s(p, sc.config.n_micro) for p in enumerate_pipelines(sc)),
               default=math.inf)


def exhaustive_pipeline_step_s(model: LayeredModel, groups: Sequence[FlavorGroup],
                               config: PipelineConfig) -> float:
    """Best step time of ``model`` over ``groups`` by enumeration."""
    return best_pipeline_step_s(StageCosts(model, canonical_groups(groups), config))


def exhaustive_hybrid_step_s(model: LayeredModel, counts: Mapping[GpuFlavor, int],
                             global_bsz: int, cost_model: CostModel,
                             gpus_per_node: int = 8, base: PipelineConfig | None = None
                             ) -> float:
    """Best step time over the hybrid planner's whole space, every pipeline enumerated."""
    best = math.inf
    dp = plan_data_parallel_layered(model, counts, global_bsz, cost_model, gpus_per_node)
    if dp is not None:
        best = dp.step_time_s
    proto = base or PipelineConfig(1, 1)
    for copies, mb, n_micro in pipeline_configs(counts, global_bsz):
        groups = flavor_groups(model, counts, copies, cost_model, gpus_per_node)
        cfg = PipelineConfig(mb, n_micro, copies, proto.overhead_s, proto.allow_recompute,
                             proto.zero_levels, proto.max_tp)
        best = min(best, exhaustive_pipeline_step_s(model, groups, cfg))
    return best
