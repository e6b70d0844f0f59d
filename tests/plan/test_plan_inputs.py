"""Bad input to the 3-D planner: one clear line each, naming what is wrong and what would do."""

from __future__ import annotations

import pytest

from tessera.errors import NoProfileError, SpecError, UnknownFlavorError
from tessera.perf.steptime import CostModel
from tessera.plan.api import parse_devices
from tessera.plan.hybrid import plan_hybrid
from tessera.plan.models import gpt, layered_model
from tessera.plan.pipeline import PipelineConfig

CM = CostModel(estimate_unprofiled=True)


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_state_larger_than_all_memory_names_the_shortfall_and_the_gpus_to_add() -> None:
    with pytest.raises(SpecError) as exc:
        plan_hybrid(layered_model("llama-70b"), parse_devices("A100:8"), 8, cost_model=CM)
    text = one_line(exc)
    assert "needs 1027.8 GiB" in text and "568.0 GiB usable" in text
    assert "short by 459.8 GiB" in text and "add at least 7 more A100-80GB" in text


def test_denied_savers_are_checked_and_named() -> None:
    """16 A100s hold LLaMA-70B's state, but only with ZeRO-3 and recomputation."""
    base = PipelineConfig(1, 1, zero_levels=(0,), allow_recompute=False)
    with pytest.raises(SpecError) as exc:
        plan_hybrid(layered_model("llama-70b"), parse_devices("A100:16"), 16, cost_model=CM,
                    base=base)
    text = one_line(exc)
    assert "no partition keeps every stage" in text
    assert "it fits with all memory savers enabled (ZeRO-3, recomputation" in text


def test_denied_savers_that_would_not_help_say_so() -> None:
    """At 32k tokens one block's attention activations outgrow a T4 even split 8 ways."""
    base = PipelineConfig(1, 1, zero_levels=(0,), allow_recompute=False, max_tp=1)
    with pytest.raises(SpecError) as exc:
        plan_hybrid(gpt(1, 4096, 64, 32768), parse_devices("T4:8"), 8, cost_model=CM,
                    base=base)
    text = one_line(exc)
    assert "no partition keeps every stage" in text
    assert "even with ZeRO-3, recomputation and tensor parallelism up to 8 it does not fit" in text


@pytest.mark.parametrize(("batch", "copies", "mb", "hint"),
                         [(100, 8, 8, "multiple of 64 (e.g. 64 or 128)"),
                          (3, 2, None, "multiple of 2 (e.g. 2 or 4)"),
                          (6, None, 4, "multiple of 4 (e.g. 4 or 8)")])
def test_batch_not_divisible_by_copies_times_micro_batch(batch: int, copies: int | None,
                                                         mb: int | None, hint: str) -> None:
    with pytest.raises(SpecError, match=r"global batch \d+ is not divisible") as exc:
        plan_hybrid(layered_model("gpt-2x1024"), parse_devices("V100:8"), batch, cost_model=CM,
                    dp_copies=copies, micro_bsz=mb)
    assert hint in one_line(exc)


def test_fixed_copies_and_micro_batch_are_honoured_and_checked() -> None:
    plan = plan_hybrid(layered_model("gpt-4x1024"), parse_devices("V100:4,T4:4"), 16,
                       cost_model=CM, dp_copies=2, micro_bsz=2, max_layers=6)
    assert plan.kind == "data-parallel" or (plan.dp_copies, plan.micro_bsz) == (2, 2)
    with pytest.raises(SpecError, match="pipeline copies must be between 1 and 4"):
        plan_hybrid(layered_model("gpt-2x1024"), parse_devices("V100:4"), 16, cost_model=CM,
                    dp_copies=8)
    with pytest.raises(SpecError, match=r"micro-batch size must be one of \(1, 2, 4, 8\)"):
        plan_hybrid(layered_model("gpt-2x1024"), parse_devices("V100:4"), 16, cost_model=CM,
                    micro_bsz=3)
    with pytest.raises(SpecError, match="global batch must be a positive integer"):
        plan_hybrid(layered_model("gpt-2x1024"), parse_devices("V100:4"), 0, cost_model=CM)


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(NoProfileError) as exc:
        layered_model("llama-700b")
    text = one_line(exc)
    assert "'llama-700b'" in text and "llama-70b" in text and "gpt-<layers>x<hidden>" in text


def test_unknown_gpu_lists_the_catalog() -> None:
    with pytest.raises(UnknownFlavorError) as exc:
        parse_devices("H100:8,L40:8")
    text = one_line(exc)
    assert "'L40'" in text and "L40S" in text and "L4" in text


def test_l40s_and_l4_plan_with_estimated_times() -> None:
    plan = plan_hybrid(layered_model("llama-7b"), parse_devices("L40S:8,L4:8"), 64,
                       cost_model=CM, max_layers=8)
    assert plan.step_time_s > 0
    assert {"L40S", "L4"} <= set(plan.estimated)
