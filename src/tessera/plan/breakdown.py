"""Where a plan's step time goes, and what bounds it: compute, memory or communication.

A pipeline step takes ``Σ_s t_s + (M − 1) · t_b + max_s A_s`` (:mod:`tessera.plan.pipeline`;
b the bottleneck stage). Each stage's per-micro-batch time ``t_s`` is split into

* **compute** — its FLOPs at the flavor's sustained rate (the roofline's calibrated
  efficiency, :mod:`tessera.perf.roofline`) plus the fixed per-pass overhead;
* **communication** — the tensor-parallel all-reduces inside the stage and the hand-off of its
  output to the next stage;

and the gradient synchronisation ``max A_s`` is communication too. The step's **bound** is the
larger of the two totals, unless the bottleneck stage is **memory**-bound in the roofline
sense: the bytes it must move through device memory per micro-batch (its weights read once
forward and twice backward, once more when it recomputes; its stashed activations written
and read back) take longer at the GPU's memory bandwidth than its FLOPs take. The planner's
stage times are FLOP-based, so a memory-bound plan is one whose prediction is optimistic.

A data-parallel plan splits into its slowest device's compute and the gradient all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessera.plan.layers import FP16_BYTES

if TYPE_CHECKING:
    from tessera.perf.steptime import CostModel
    from tessera.plan.hybrid import HybridPlan
    from tessera.plan.layers import LayeredModel
    from tessera.plan.stages import Stage

COMPUTE = "compute"
MEMORY = "memory"
COMMUNICATION = "communication"


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """A plan's step time in compute and communication, and its bound.

    Attributes:
        step_time_s: the plan's predicted step time.
        compute_s: FLOP time and per-pass overhead on the step's critical path.
        communication_s: tensor-parallel all-reduces, stage hand-offs and gradient sync on it.
        memory_floor_s: the bottleneck stage's memory-bandwidth floor per micro-batch (0 for
            data parallel, which the profiles measure directly).
        bottleneck_flops_s: the bottleneck stage's FLOP time per micro-batch.
        bound: :data:`COMPUTE`, :data:`MEMORY` or :data:`COMMUNICATION`.
    """

    step_time_s: float
    compute_s: float
    communication_s: float
    memory_floor_s: float
    bottleneck_flops_s: float
    bound: str

    def to_json(self) -> dict[str, object]:
        return {"bound": self.bound, "compute_s": self.compute_s,
                "communication_s": self.communication_s, "memory_floor_s": self.memory_floor_s}

    def describe(self) -> str:
        total = self.compute_s + self.communication_s
        share = self.communication_s / total if total > 0 else 0.0
        text = (f"bound: {self.bound} (compute {self.compute_s:.4f} s, communication "
                f"{self.communication_s:.4f} s = {share:.0%} of the critical path)")
        if self.bound == MEMORY:
            text += (f"; bottleneck stage needs {self.memory_floor_s * 1e3:.2f} ms/micro-batch "
                     f"of memory traffic against {self.bottleneck_flops_s * 1e3:.2f} ms of "
                     "FLOPs, so the predicted time is optimistic")
        return text


def breakdown(plan: HybridPlan, model: LayeredModel, cost_model: CostModel,
              overhead_s: float) -> StepBreakdown:
    """The compute/communication split and bound of ``plan`` (module docstring).

    Args:
        model: the plan's model, uncoarsened (stage layer numbers index its chain).
        cost_model: the cost model the plan was made with (sustained FLOP/s per flavor).
        overhead_s: the fixed per-pass cost the plan was priced with.
    """
    if plan.dp is not None:
        dp = plan.dp
        bound = COMMUNICATION if dp.allreduce_time_s > dp.compute_time_s else COMPUTE
        return StepBreakdown(plan.step_time_s, dp.compute_time_s, dp.allreduce_time_s, 0.0,
                             dp.compute_time_s, bound)
    rl = cost_model.roofline()
    flop_s = []
    for st in plan.stages:
        rate = rl.sustained_flops_per_s(st.flavor, model.workload)
        flop_s.append(_stage_flops(st, model, plan.micro_bsz) / (rate * st.tp))
    own = [min(f + overhead_s, st.compute_s) for f, st in zip(flop_s, plan.stages, strict=True)]
    b = max(range(len(plan.stages)), key=lambda k: plan.stages[k].time_s)
    m = plan.n_micro - 1
    compute = sum(own) + m * own[b]
    communication = max(0.0, plan.step_time_s - compute)   # TP, hand-offs, gradient sync
    floor = _memory_floor_s(plan.stages[b], model, plan.micro_bsz)
    if floor > flop_s[b]:
        bound = MEMORY
    elif communication > compute:
        bound = COMMUNICATION
    else:
        bound = COMPUTE
    return StepBreakdown(plan.step_time_s, compute, communication, floor, flop_s[b], bound)


def _stage_flops(st: Stage, model: LayeredModel, micro_bsz: int) -> float:
    """FLOPs one GPU group of the stage does per micro-batch (before dividing by TP)."""
    fwd = sum(x.fwd_flops for x in model.layers[st.first_layer:st.end_layer])
    return fwd * (4.0 if st.recompute else 3.0) * micro_bsz / st.replicas


def _memory_floor_s(st: Stage, model: LayeredModel, micro_bsz: int) -> float:
    """Device-memory traffic of one micro-batch on one GPU of the stage, over its bandwidth."""
    layers = model.layers[st.first_layer:st.end_layer]
    weight_reads = 4 if st.recompute else 3
    weights = sum(x.params for x in layers) / st.tp * FP16_BYTES * weight_reads
    stash = sum(x.stash_bytes for x in layers) / st.tp * micro_bsz / st.replicas * 2
    return (weights + stash) / (st.flavor.mem_bw_gbps * 1e9)
