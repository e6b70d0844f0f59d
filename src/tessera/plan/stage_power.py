"""Per-stage power limits in a pipeline plan (Perseus, SOSP'24): less energy, same step time.

In a 1F1B pipeline (:mod:`tessera.plan.pipeline`) a step takes

    T_step = Σ_s t_s + (M − 1) · max_s t_s + max_s A_s

so only the slowest stage sets the pace of the M − 1 steady micro-batches; every other stage
finishes its micro-batch early and waits. Perseus slows such stages down (lower GPU frequency)
until they just keep pace: the step time barely moves and the GPUs draw less. Here a stage is
slowed by a lower *power limit*, through any :class:`~tessera.perf.power.PowerModel`: at limit
L a stage's compute per micro-batch becomes ``compute_s × step_time_factor(L)`` (its hand-off
to the next stage is unchanged) and its GPUs draw ``avg_power_w(L)`` while computing and
``idle_power_w`` otherwise (bubbles, hand-offs, gradient sync).

Energy per step, over all ``dp_copies`` copies of the pipeline::

    E = copies · Σ_s gpus_s · (P_s(L_s) · M · c_s(L_s) + P_idle,s · (T_step − M · c_s(L_s)))

:func:`tune_stage_power` starts every stage at its maximum limit and greedily lowers the limit
whose energy saving per second of added step time is largest, while the step time stays within
``max_slowdown`` (default 1 %) of the plan's. The bottleneck stage itself may be capped too
where the model says the cap costs less time than the budget allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.perf.power import PowerEstimate, PowerModel
from tessera.plan.stages import Stage


@dataclass(frozen=True, slots=True)
class StageEnergy:
    """One stage at its chosen power limit.

    Attributes:
        stage: index along the pipeline.
        flavor: the stage's GPU flavor.
        gpus: GPUs of one pipeline copy in this stage.
        power_limit_w, max_limit_w: the chosen limit and the flavor's maximum.
        compute_s: compute per micro-batch at the chosen limit.
        busy_power_w: board power per GPU while computing.
        energy_j: the stage's energy per step over all pipeline copies.
    """

    stage: int
    flavor: GpuFlavor
    gpus: int
    power_limit_w: float
    max_limit_w: float
    compute_s: float
    busy_power_w: float
    energy_j: float


@dataclass(frozen=True, slots=True)
class PipelineEnergy:
    """Energy per step of a pipeline plan at full power and with tuned per-stage limits."""

    base_step_s: float
    step_s: float
    base_energy_j: float
    energy_j: float
    stages: tuple[StageEnergy, ...]
    max_slowdown: float
    measured: bool
    sources: tuple[str, ...]

    @property
    def saving(self) -> float:
        """Fraction of the full-power energy per step saved."""
        return 1.0 - self.energy_j / self.base_energy_j

    @property
    def slowdown(self) -> float:
        """Step time over the full-power step time, minus one."""
        return self.step_s / self.base_step_s - 1.0

    def to_json(self) -> dict[str, Any]:
        return {"energy_per_step_j": self.base_energy_j, "tuned_energy_per_step_j": self.energy_j,
                "saving": self.saving, "step_time_s": self.base_step_s,
                "tuned_step_time_s": self.step_s, "slowdown": self.slowdown,
                "max_slowdown": self.max_slowdown, "measured": self.measured,
                "sources": list(self.sources),
                "stages": [{"stage": s.stage, "flavor": s.flavor.short, "gpus": s.gpus,
                            "power_limit_w": s.power_limit_w, "max_limit_w": s.max_limit_w,
                            "compute_s": s.compute_s, "busy_power_w": s.busy_power_w,
                            "energy_j": s.energy_j} for s in self.stages]}

    def describe(self) -> list[str]:
        mark = "" if self.measured else " (" + ", ".join(self.sources) + ")"
        out = [f"  energy: {self.base_energy_j / 1e3:.2f} kJ/step at full power; "
               f"{self.energy_j / 1e3:.2f} kJ/step with per-stage power limits: "
               f"{self.saving:.1%} less at {self.slowdown:+.2%} step time "
               f"(allowed {self.max_slowdown:.1%}){mark}"]
        for s in self.stages:
            out.append(f"  stage {s.stage} power: {s.power_limit_w:g} of {s.max_limit_w:g} W, "
                       f"{s.compute_s * 1e3:.2f} ms/micro-batch, {s.busy_power_w:.0f} W busy, "
                       f"{s.energy_j / 1e3:.2f} kJ/step")
        return out


@dataclass(frozen=True, slots=True)
class _Option:
    limit_w: float
    est: PowerEstimate


def tune_stage_power(stages: Sequence[Stage], n_micro: int, dp_copies: int, model: str,
                     power: PowerModel, max_slowdown: float = 0.01) -> PipelineEnergy:
    """Choose each stage's power limit: least energy per step within ``max_slowdown``.

    Raises:
        SpecError: no stages (a data-parallel plan), or ``max_slowdown`` outside [0, 1].
    """
    if not stages:
        raise SpecError("per-stage power needs a pipeline plan; this plan has no stages")
    if not (math.isfinite(max_slowdown) and 0.0 <= max_slowdown <= 1.0):
        raise SpecError(f"max slowdown must be in [0, 1], got {max_slowdown}")
    if n_micro < 1 or dp_copies < 1:
        raise SpecError(f"n_micro and dp_copies must be >= 1, got {n_micro}, {dp_copies}")
    options = []
    for st in stages:
        limits = sorted(power.limit_range(st.flavor).limits_w(), reverse=True)
        options.append([_Option(w, power.estimate(model, model, st.flavor, w)) for w in limits])
    idle = [power.idle_power_w(st.flavor) for st in stages]
    sync_s = max(st.allreduce_s for st in stages)

    def evaluate(pick: list[int]) -> tuple[float, float]:
        comp = [st.compute_s * options[k][i].est.step_time_factor
                for k, (st, i) in enumerate(zip(stages, pick, strict=True))]
        times = [c + st.p2p_s for c, st in zip(comp, stages, strict=True)]
        step = sum(times) + (n_micro - 1) * max(times) + sync_s
        energy = 0.0
        for k, st in enumerate(stages):
            busy = n_micro * comp[k]
            energy += st.gpus * (options[k][pick[k]].est.avg_power_w * busy
                                 + idle[k] * max(0.0, step - busy))
        return step, energy * dp_copies

    pick = [0] * len(stages)
    base_step, base_energy = evaluate(pick)
    budget = base_step * (1.0 + max_slowdown)
    step, energy = base_step, base_energy
    while True:
        best: tuple[float, int, int, float, float] | None = None
        for k in range(len(stages)):
            for i in range(pick[k] + 1, len(options[k])):
                trial = [*pick[:k], i, *pick[k + 1:]]
                t_s, e_j = evaluate(trial)
                if t_s > budget * (1 + 1e-12) or e_j >= energy:
                    continue
                score = (energy - e_j) / max(t_s - step, 1e-12)
                if best is None or score > best[0]:
                    best = (score, k, i, t_s, e_j)
        if best is None:
            break
        _, k, i, step, energy = best
        pick[k] = i
    return _result(stages, options, pick, idle, n_micro, dp_copies, base_step, step,
                   base_energy, energy, max_slowdown)


def _result(stages: Sequence[Stage], options: list[list[_Option]], pick: list[int],
            idle: list[float], n_micro: int, copies: int, base_step: float, step: float,
            base_energy: float, energy: float, max_slowdown: float) -> PipelineEnergy:
    out = []
    for k, st in enumerate(stages):
        opt = options[k][pick[k]]
        comp = st.compute_s * opt.est.step_time_factor
        busy = n_micro * comp
        e = copies * st.gpus * (opt.est.avg_power_w * busy + idle[k] * max(0.0, step - busy))
        out.append(StageEnergy(k, st.flavor, st.gpus, opt.limit_w, options[k][0].limit_w,
                               comp, opt.est.avg_power_w, e))
    ests = [o.est for opts in options for o in opts]
    return PipelineEnergy(base_step, step, base_energy, energy, tuple(out), max_slowdown,
                          all(e.measured for e in ests),
                          tuple(sorted({e.source for e in ests})))
