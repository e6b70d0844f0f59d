"""Straggler injection and the straggler/coding/staleness options: reproducible draws, a
slowdown a coded step can cut short, and bad input refused before any rank starts (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.train.config import TrainConfig
from tessera.train.stragglers import (
    Slowdown,
    Stragglers,
    check_straggler_options,
    is_straggler,
    straggler_schedule,
)

SRC = Path(__file__).resolve().parents[2] / "src"


def test_the_draw_is_reproducible_and_has_the_requested_rate():
    a = straggler_schedule(seed=7, steps=400, ranks=5, rate=0.05)
    assert a == straggler_schedule(seed=7, steps=400, ranks=5, rate=0.05)
    assert a != straggler_schedule(seed=8, steps=400, ranks=5, rate=0.05)
    slowed = sum(len(s) for s in a)
    assert 0.03 * 2000 <= slowed <= 0.07 * 2000  # 100 expected; ±2.2 sigma-ish band
    assert not any(is_straggler(7, s, r, 0.0) for s in range(50) for r in range(4))
    assert all(is_straggler(7, s, r, 1.0) for s in range(50) for r in range(4))


def test_the_draw_does_not_depend_on_the_process(tmp_path):
    """Another interpreter (another hash seed) draws the same schedule: every rank agrees."""
    code = ("from tessera.train.stragglers import straggler_schedule as s; "
            "print(s(3, 60, 4, 0.2))")
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == str(straggler_schedule(3, 60, 4, 0.2))


def test_factor_applies_only_to_drawn_rank_steps():
    inj = Stragglers(rate=0.3, factor=3.0, seed=1)
    for step in range(30):
        for rank in range(3):
            expected = 3.0 if is_straggler(1, step, rank, 0.3) else 1.0
            assert inj.factor_at(step, rank) == expected


def test_a_slowdown_is_cut_short_when_the_step_is_decided():
    # an hour's slowdown: only the cancel can end the wait (a wait that ignored it would hang
    # until the suite's timeout), and it says it was cut short
    polls = iter(range(3))
    finished = Slowdown(time.perf_counter() + 3600.0).wait(
        cancel=lambda: next(polls, None) is None)
    assert not finished
    start = time.perf_counter()
    assert Slowdown(start + 0.02).wait(cancel=lambda: False)
    assert time.perf_counter() - start >= 0.02


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"stragglers": 1.5}, "straggler rate must be in [0, 1], got 1.5"),
        ({"stragglers": -0.1}, "straggler rate must be in [0, 1]"),
        ({"straggler_factor": 0.5}, "straggler factor must be ≥ 1"),
        ({"coded": True, "code_k": 4}, "code k must be between 1 and the 3 ranks, got k = 4"),
        ({"coded": True, "code_k": 0}, "code k must be between 1 and the 3 ranks, got k = 0"),
        ({"coded": True, "code_k": 3}, "tolerates no straggler"),
        ({"code_k": 2}, "needs --coded"),
        ({"staleness": -1}, "staleness must be ≥ 0 steps, got -1"),
    ],
    ids=["rate-high", "rate-low", "factor", "k-above-n", "k-zero", "k-equals-n-no-fallback",
         "k-without-coded", "negative-staleness"],
)
def test_bad_options_are_refused_by_the_config(kwargs, fragment):
    with pytest.raises(SpecError) as e:
        TrainConfig("mlp", "A100:3", **kwargs)
    assert fragment in str(e.value)


def test_coded_with_one_rank_is_refused():
    with pytest.raises(SpecError, match="--coded needs at least 2 ranks"):
        check_straggler_options(ranks=1, rate=0.0, factor=3.0, coded=True, code_k=None,
                                staleness=0)


def test_step_modes():
    assert TrainConfig("mlp", "A100:3").step_mode == "sync"
    assert TrainConfig("mlp", "A100:3", staleness=0).step_mode == "sync"
    assert TrainConfig("mlp", "A100:3", coded=True).step_mode == "coded"
    assert TrainConfig("mlp", "A100:3", coded=True).code_size == 2
    assert TrainConfig("mlp", "A100:3", staleness=2).step_mode == "stale"
    # k = n: coding cannot help; the staleness bound is the fallback.
    assert TrainConfig("mlp", "A100:3", coded=True, code_k=3, staleness=1).step_mode == "stale"
    # Neither coded nor stale steps rebalance (their splits are fixed by the code / the bound).
    assert not TrainConfig("mlp", "A100:3", coded=True).rebalance


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--coded", "--code-k", "5"], "code k must be between 1 and the 3 ranks, got k = 5"),
        (["--coded", "--code-k", "0"], "got k = 0"),
        (["--stragglers", "2"], "straggler rate must be in [0, 1], got 2"),
        (["--staleness", "-3"], "staleness must be ≥ 0 steps, got -3"),
    ],
    ids=["k-above-n", "k-zero", "rate", "staleness"],
)
def test_cli_bad_input_exits_2_before_any_rank_starts(args, fragment, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "tessera", "train", "mlp", "--devices", "A100:3",
         "--checkpoint-dir", str(tmp_path / "ck"), *args],
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert fragment in proc.stdout + proc.stderr
    assert "tessera train mlp" not in proc.stdout  # nothing launched, nothing printed
    assert not (tmp_path / "ck").exists()


def test_cli_coded_with_one_rank_exits_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "tessera", "train", "mlp", "--devices", "A100:1", "--coded"],
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--coded needs at least 2 ranks" in proc.stdout + proc.stderr


def test_help_shows_the_options_with_an_example():
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "tessera", "train", "--help"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    for option in ("--stragglers", "--straggler-factor", "--coded", "--code-k", "--staleness"):
        assert option in out
    assert "--stragglers 0.05" in out and "--coded" in out


def test_compression_with_coded_or_stale_steps_is_refused_before_any_rank_starts() -> None:
    """Compression and the emulated link act on the synchronous all-reduce; coded and stale
    steps exchange point to point, so the combination would silently do nothing."""
    from tessera.errors import SpecError
    from tessera.train.config import TrainConfig

    for extra in ({"coded": True}, {"staleness": 1}):
        for comm in ({"compress": "fp16"}, {"link_gbps": 1.0}):
            with pytest.raises(SpecError, match="point to point"):
                TrainConfig(example="mlp", devices="A100:3", **extra, **comm)  # type: ignore[arg-type]
