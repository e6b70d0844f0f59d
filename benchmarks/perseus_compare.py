"""Per-stage power limits (Perseus) on a Perseus-like setting: GPT-3 XL in 4 stages on A100s.

Perseus (SOSP'24) reports 13.2 % less energy at 0.1 % slowdown for GPT-3 XL (1.3B) in a
4-stage pipeline on A100s, and 28.5 % at 0 % for T5-3B in 8 stages on A40s. Tessera's planner
would not choose a 4-stage pipeline for a 1.3B model on 4 GPUs (data parallel is faster), so
this script builds that pipeline by hand: one A100 per stage, the layer split with the least
bottleneck, ``--micro`` micro-batches of ``--micro-bsz``; then tunes each stage's power limit
with :func:`tessera.plan.stage_power.tune_stage_power` and the one power model,
:func:`tessera.perf.power_estimate.default_power_model` (Zeus measured no A100: its fitted
estimate answers). T5-3B on A40 is not reproducible
here (no encoder-decoder model in the planner, no A40 flavor). Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/perseus_compare.py [--micro 16] [--micro-bsz 4]
"""

from __future__ import annotations

import argparse
import itertools

from tessera.model.gpus import resolve_flavor
from tessera.perf.power_estimate import default_power_model
from tessera.plan.devices import default_cost_model
from tessera.plan.hybrid import flavor_groups
from tessera.plan.models import layered_model
from tessera.plan.stage_power import tune_stage_power
from tessera.plan.stages import PipelineConfig, Stage, StageCosts, StageOption


def balanced_stages(model_name: str, flavor: str, n_stages: int, micro_bsz: int,
                    n_micro: int) -> tuple[Stage, ...]:
    """One GPU per stage, the layer cut of least bottleneck (exhaustive over cuts)."""
    model = layered_model(model_name)
    f = resolve_flavor(flavor)
    groups = flavor_groups(model, {f: n_stages}, 1, default_cost_model(), 8)
    costs = StageCosts(model, groups, PipelineConfig(micro_bsz, n_micro, zero_levels=(0,)))
    opt = StageOption(1, 1, False, 0)
    best: tuple[float, tuple[Stage, ...]] | None = None
    for cuts in itertools.combinations(range(1, model.n_layers), n_stages - 1):
        bounds = (0, *cuts, model.n_layers)
        stages = tuple(costs.stage(0, opt, a, b, min(n_stages - k, n_micro))
                       for k, (a, b) in enumerate(itertools.pairwise(bounds)))
        worst = max(s.time_s for s in stages)
        if best is None or worst < best[0]:
            best = (worst, stages)
    assert best is not None
    return best[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt3-1.3b")
    ap.add_argument("--flavor", default="A100-80GB")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--micro-bsz", type=int, default=4)
    a = ap.parse_args()
    stages = balanced_stages(a.model, a.flavor, a.stages, a.micro_bsz, a.micro)
    print(f"{a.model}, {a.stages} stages x 1 {a.flavor}, {a.micro} micro-batches of "
          f"{a.micro_bsz}: layers " + ", ".join(f"{s.first_layer}-{s.end_layer - 1}"
                                               for s in stages)
          + "; ms/micro-batch " + ", ".join(f"{s.time_s * 1e3:.1f}" for s in stages))
    for slow in (0.0, 0.001, 0.01):
        e = tune_stage_power(stages, a.micro, 1, a.model, default_power_model(), slow)
        limits = ", ".join(f"{s.power_limit_w:g}" for s in e.stages)
        print(f"max slowdown {slow:5.1%}: saving {e.saving:5.1%} at {e.slowdown:+.2%}, "
              f"limits W [{limits}]")


if __name__ == "__main__":
    main()
