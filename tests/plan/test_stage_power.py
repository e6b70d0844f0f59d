"""Per-stage power limits in pipeline plans (issue 34, part 4: Perseus), default power model."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.power_estimate import ESTIMATED_SOURCE, default_power_model
from tessera.plan.stage_power import tune_stage_power
from tessera.plan.stages import Stage, StageOption
from tests.cli.runner import run_tessera

OPT = StageOption(1, 1, False, 0)


def _stage(flavor: str, compute_s: float, k: int) -> Stage:
    return Stage(resolve_flavor(flavor), OPT, k, k + 1, 1, compute_s, 0.002, 0.01, 10.0)


def test_planner_reads_the_one_default_power_model() -> None:
    """The planner's stages are priced by :func:`default_power_model` (no model of its own):
    H100 and A100 are not in Zeus's table, so every stage is the documented estimate."""
    stages = [_stage("h100", 0.080, 0), _stage("a100", 0.060, 1)]
    e = tune_stage_power(stages, 16, 1, "llama-7b", default_power_model(), 0.01)
    assert e.sources == (ESTIMATED_SOURCE,) and not e.measured
    for s, st in zip(e.stages, stages, strict=True):
        assert s.max_limit_w == default_power_model().limit_range(st.flavor).max_w


def _brute(stages: list[Stage], n_micro: int, slow: float) -> float:
    """Least energy over every combination of limits within the slowdown (the ground truth)."""
    m = default_power_model()
    grids = [m.limit_range(s.flavor).limits_w() for s in stages]
    idle = [m.idle_power_w(s.flavor) for s in stages]
    sync = max(s.allreduce_s for s in stages)

    def run(limits: tuple[float, ...]) -> tuple[float, float]:
        ests = [m.estimate("x", None, s.flavor, w) for s, w in zip(stages, limits, strict=True)]
        comp = [s.compute_s * e.step_time_factor for s, e in zip(stages, ests, strict=True)]
        times = [c + s.p2p_s for c, s in zip(comp, stages, strict=True)]
        step = sum(times) + (n_micro - 1) * max(times) + sync
        return step, sum(e.avg_power_w * n_micro * c + i * (step - n_micro * c)
                         for e, c, i in zip(ests, comp, idle, strict=True))

    base, _ = run(tuple(g[-1] for g in grids))
    return min(e for t, e in map(run, itertools.product(*grids)) if t <= base * (1 + slow))


def test_fast_stages_run_at_lower_power_same_step_less_energy() -> None:
    stages = [_stage("h100", 0.080, 0), _stage("a100", 0.060, 1)]
    e = tune_stage_power(stages, 16, 2, "llama-7b", default_power_model(), 0.01)
    # the saving is the model's least energy within the slowdown (brute force, 2 copies)
    assert 0 < e.slowdown <= 0.01 and e.saving > 0
    assert e.energy_j == pytest.approx(2 * _brute(stages, 16, 0.01), rel=1e-9)
    assert e.stages[1].power_limit_w < e.stages[1].max_limit_w
    assert e.stages[1].compute_s > 0.060
    assert e.energy_j == pytest.approx(sum(s.energy_j for s in e.stages))
    # Full power: the energy per step by hand (2 copies, 1 GPU per stage).
    step = 0.082 + 0.062 + 15 * 0.082 + 0.01
    m = default_power_model()
    by_hand = 2 * sum(m.estimate("x", None, s.flavor).avg_power_w * 16 * s.compute_s
                      + m.idle_power_w(s.flavor) * (step - 16 * s.compute_s) for s in stages)
    assert e.base_step_s == pytest.approx(step) and e.base_energy_j == pytest.approx(by_hand)


def test_no_slowdown_allowed_changes_nothing() -> None:
    stages = [_stage("h100", 0.080, 0), _stage("a100", 0.060, 1)]
    e = tune_stage_power(stages, 16, 1, "x", default_power_model(), 0.0)
    assert e.saving == 0.0 and e.slowdown == 0.0
    assert all(s.power_limit_w == s.max_limit_w for s in e.stages)


@pytest.mark.parametrize("slow", [0.001, 0.01, 0.05])
def test_greedy_matches_brute_force_on_small_pipelines(slow: float) -> None:
    stages = [_stage("h100", 0.080, 0), _stage("a100", 0.060, 1), _stage("a100", 0.075, 2)]
    e = tune_stage_power(stages, 8, 1, "x", default_power_model(), slow)
    assert e.energy_j == pytest.approx(_brute(stages, 8, slow), rel=1e-9)


@pytest.mark.parametrize(("slow", "message"), [
    (-0.1, "max slowdown must be in [0, 1], got -0.1"),
    (1.5, "got 1.5"), (math.nan, "got nan")])
def test_bad_slowdown_is_an_error(slow: float, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        tune_stage_power([_stage("h100", 0.08, 0)], 4, 1, "x", default_power_model(), slow)


def test_data_parallel_plan_has_no_stages_to_tune() -> None:
    with pytest.raises(SpecError, match="needs a pipeline plan"):
        tune_stage_power([], 4, 1, "x", default_power_model())


def test_plan_energy_on_the_readme_llama_example(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["plan", "--model", "llama-7b", "--devices", "H100:8,A100:8", "--global-batch",
            "64", "--energy"]
    code, out, _ = run_tessera(args, capsys, monkeypatch)
    assert code == 0
    assert "kJ/step at full power" in out and ESTIMATED_SOURCE in out
    code, out, _ = run_tessera([*args, "--json"], capsys, monkeypatch)
    energy = json.loads(out)["energy"]
    assert energy["saving"] > 0 and 0 < energy["slowdown"] <= 0.01
    assert energy["tuned_energy_per_step_j"] < energy["energy_per_step_j"]
    assert not energy["measured"] and len(energy["stages"]) == 2
    assert energy["sources"] == [ESTIMATED_SOURCE]  # (the one default model, estimated here)


def test_plan_energy_on_a_data_parallel_plan_is_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_tessera(["plan", "--model", "imagenet", "--devices", "V100:4",
                                "--global-batch", "256", "--energy"], capsys, monkeypatch)
    assert code == 2 and "--energy tunes the stages of a pipeline plan" in err
    code, _, err = run_tessera(["plan", "--model", "llama-7b", "--devices", "H100:8,A100:8",
                                "--global-batch", "64", "--energy", "--max-slowdown", "2"],
                               capsys, monkeypatch)
    assert code == 2 and "max slowdown must be in [0, 1], got 2.0" in err
