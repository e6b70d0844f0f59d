"""A peer dying in teardown after rank 0 wrote the result is not a training failure."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tessera.train import launcher
from tessera.train.launcher import RESULT_NAME, _rank0_finishes

# Far above any real wait: only a hang would reach it, never a slow, busy machine.
HANG_S = 300.0


def _write_result_later(run_dir: str, delay_s: float) -> None:
    time.sleep(delay_s)
    (Path(run_dir) / RESULT_NAME).write_text("{}")


def _die() -> None:
    raise SystemExit(3)


def test_rank0_still_saving_gets_time_to_write_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The grace period is stretched so that a loaded machine (slow fork, late write) cannot
    # turn this into a failure; the check is that the result is waited for, not how fast.
    monkeypatch.setattr(launcher, "STOP_GRACE_S", HANG_S)
    ctx = mp.get_context("fork")
    rank0 = ctx.Process(target=_write_result_later, args=(str(tmp_path), 0.3))
    rank0.start()
    try:
        assert _rank0_finishes(rank0, tmp_path)
    finally:
        rank0.join()


def test_a_dead_rank0_without_a_result_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = mp.get_context("fork")
    rank0 = ctx.Process(target=_die)
    rank0.start()
    rank0.join()
    naps: list[float] = []
    clock = SimpleNamespace(monotonic=time.monotonic, sleep=naps.append)
    monkeypatch.setattr(launcher, "time", clock)  # the launcher's clock only, not the process's
    assert not _rank0_finishes(rank0, tmp_path)
    assert naps == []  # no polling for a result from a rank that is already gone
