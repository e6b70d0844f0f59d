"""Exhaustive reference planners, for tests and benchmarks on small cases.

They enumerate every plan in the same search space as the fast planners — every partition of
the layers into stages, every flavor and replication per stage with each flavor's stages
contiguous, every pipeline copy count and micro-batch size — and score each plan directly. They
are exponential; use them only where the number of layers and devices is small.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

from tessera.model.gpus import GpuFlavor
from tessera.perf.steptime import CostModel
from tessera.plan.hybrid import flavor_groups, pipeline_configs, plan_data_parallel_layered
from tessera.plan.models import LayeredModel
from tessera.plan.pipeline import (
    PipelineConfig,
    Stage,
    StageCosts,
    replica_choices,
    step_time_s,
)


def enumerate_pipelines(sc: StageCosts) -> Iterator[list[Stage]]:
    """Every memory-feasible pipeline in the planner's search space."""
    counts = [g.count for g in sc.groups]

    def walk(i: int, current: int, done: frozenset[int], left: list[int],
             acc: list[Stage]) -> Iterator[list[Stage]]:
        if i == sc.n:
            yield list(acc)
            return
        for gi in range(len(sc.groups)):
            if gi in done or left[gi] == 0:
                continue
            next_done = done if gi == current or current < 0 else done | {current}
            for d in replica_choices(left[gi]):
                obj = sc.objective(gi, d)
                for j in range(i + 1, sc.n + 1):
                    if not math.isfinite(obj[i, j]):
                        continue
                    left[gi] -= d
                    acc.append(sc.stage(gi, d, i, j))
                    yield from walk(j, gi, next_done, left, acc)
                    acc.pop()
                    left[gi] += d

    yield from walk(0, -1, frozenset(), list(counts), [])


def bottleneck_s(stages: Sequence[Stage], config: PipelineConfig) -> float:
    """The DP objective of a pipeline: max over stages of t_s + allreduce_s / M."""
    return max(s.time_s + s.allreduce_s / config.n_micro for s in stages)


def best_pipeline_bottleneck(sc: StageCosts) -> float:
    """Smallest bottleneck over every pipeline (``inf`` when none fits)."""
    return min((bottleneck_s(p, sc.config) for p in enumerate_pipelines(sc)), default=math.inf)


def best_pipeline_step_s(sc: StageCosts) -> float:
    """Smallest full step time over every pipeline (``inf`` when none fits)."""
    return min((step_time_s(p, sc.config.n_micro) for p in enumerate_pipelines(sc)),
               default=math.inf)


def exhaustive_hybrid_step_s(model: LayeredModel, counts: Mapping[GpuFlavor, int],
                             global_bsz: int, cost_model: CostModel,
                             gpus_per_node: int = 8) -> float:
    """Best step time over the hybrid planner's whole space, every pipeline enumerated."""
    best = math.inf
    dp = plan_data_parallel_layered(model, counts, global_bsz, cost_model, gpus_per_node)
    if dp is not None:
        best = dp.step_time_s
    for copies, mb, n_micro in pipeline_configs(counts, global_bsz):
        groups = flavor_groups(model, counts, copies, cost_model, gpus_per_node)
        for recompute in (False, True):
            sc = StageCosts(model, groups, PipelineConfig(mb, n_micro, copies, recompute))
            step = best_pipeline_step_s(sc)
            if math.isfinite(step):
                best = min(best, step)
                break
    return best
