"""Starting a job's ranks as local processes, restarting them after a failure, and its result.

:func:`launch` starts one process per device (``spawn``, so each imports torch afresh and nothing
is shared by accident), points them at a free local port for the process group, and watches them.
When a rank dies, the others would block forever in the next all-reduce, so the launcher stops
them all at once. Then, like ``torchrun --max-restarts=K``, it either restarts the whole group --
which resumes from the last checkpoint -- or raises :class:`TrainingFailedError` naming the rank,
its exit status and the checkpoint a rerun would resume from.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessera.errors import TesseraError
from tessera.train.checkpoint import checkpoint_step
from tessera.train.config import TrainConfig
from tessera.train.step_stats import step_summary
from tessera.train.worker import FAIL_EXIT_CODE, RESULT_NAME, run_worker

POLL_S = 0.02
STOP_GRACE_S = 5.0


class TrainingFailedError(TesseraError):
    """A rank died and no restart was left; the message says how to resume."""


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What a finished run reports.

    Attributes:
        config: the configuration it ran with.
        run_dir: where ``result.json`` and (by default) the checkpoints are.
        emulated: heterogeneity was emulated (no GPUs), see :mod:`tessera.train.emulation`.
        flavors / precisions / speeds: per rank.
        log: one record per step (split, per-rank compute times, wall time, loss, rebalance).
        restarts: how many times the group was restarted after a failure.
        final_split: the split the balancer ended with.
    """

    config: TrainConfig
    run_dir: Path
    emulated: bool
    flavors: tuple[str, ...]
    precisions: tuple[str, ...]
    speeds: tuple[float, ...]
    log: tuple[dict[str, Any], ...]
    restarts: int
    final_split: tuple[int, ...]

    @property
    def rebalances(self) -> list[dict[str, Any]]:
        """Every adopted re-split, in order."""
        return [r["rebalance"] for r in self.log if r["rebalance"] is not None]

    @property
    def resizes(self) -> list[dict[str, Any]]:
        """Every resume at another world size or global batch
        (:meth:`tessera.train.resize.Resize.to_json`), in order."""
        return [r["resize"] for r in self.log if r.get("resize") is not None]

    def measured_records(self) -> list[dict[str, Any]]:
        """Step records used for throughput: all but the first step of each (re)start."""
        seen: set[int] = set()
        out = []
        for r in self.log:
            if r["attempt"] in seen:
                out.append(r)
            seen.add(r["attempt"])
        return out or list(self.log)

    @property
    def throughput_samples_per_s(self) -> float:
        """Global samples per second of wall time, warm-up steps excluded."""
        recs = self.measured_records()
        samples = sum(r.get("global_batch", self.config.global_batch) for r in recs)
        return samples / sum(r["wall_s"] for r in recs)

    @property
    def mean_step_s(self) -> float:
        """Mean wall time of one synchronous step, warm-up steps excluded."""
        recs = self.measured_records()
        return sum(r["wall_s"] for r in recs) / len(recs)

    @property
    def p99_step_s(self) -> float:
        """99th percentile of the step wall times (nearest rank), warm-up steps excluded."""
        times = sorted(r["wall_s"] for r in self.measured_records())
        return times[max(0, math.ceil(0.99 * len(times)) - 1)]

    @property
    def final_loss(self) -> float:
        """Global-batch loss of the last step."""
        return float(self.log[-1]["loss"])

    def summary(self) -> dict[str, Any]:
        """The JSON summary ``tessera train --json`` ends with."""
        return {
            "example": self.config.example,
            "devices": list(self.flavors),
            "emulated": self.emulated,
            "split": self.config.split,
            "global_batch": self.config.global_batch,
            "steps": len(self.log),
            "final_split": list(self.final_split),
            "precisions": list(self.precisions),
            "final_loss": self.final_loss,
            "restarts": self.restarts,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "samples_per_s": self.throughput_samples_per_s,
            "p99_step_s": self.p99_step_s,
            "step_mode": self.config.step_mode,
            "step_time_s": self.mean_step_s,
            "rebalances": len(self.rebalances),
            "rebalance_events": self.rebalances,
            **self.config.initial_split_info().to_json(),
            "compress": str(self.config.compression), "link_gbps": self.config.link_gbps,
            **step_summary(self.measured_records(), self.config.global_batch),
        }

    def mean_compute_s(self) -> list[float]:
        """Each rank's mean compute time per step over the measured steps."""
        recs = self.measured_records()
        n = len(self.flavors)
        return [sum(r["compute_s"][i] for r in recs) / len(recs) for i in range(n)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world_size: int, cfg: TrainConfig, run_dir: str, restart_count: int,
           port: int) -> None:
    os.environ.update({
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
        "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
    })
    run_worker(rank, world_size, cfg, run_dir, restart_count)


def _stop(procs: Sequence[mp.process.BaseProcess]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _rank0_finishes(rank0: mp.process.BaseProcess, run_dir: Path) -> bool:
    """Give a rank 0 that is still running a moment to write the result (it may be past the
    last step, saving the final checkpoint, when a peer dies in teardown)."""
    deadline = time.monotonic() + STOP_GRACE_S
    while rank0.exitcode is None and time.monotonic() < deadline:
        if (run_dir / RESULT_NAME).exists():
            return True
        time.sleep(POLL_S)
    return (run_dir / RESULT_NAME).exists()


def _run_group(cfg: TrainConfig, run_dir: Path, restart_count: int,
               timeout_s: float | None) -> list[tuple[int, int]]:
    """Run all ranks once; return ``(rank, exit status)`` of ranks seen failing first."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [
        ctx.Process(target=_entry, args=(r, cfg.world_size, cfg, str(run_dir), restart_count,
                                          port), name=f"tessera-rank{r}")
        for r in range(cfg.world_size)
    ]
    for p in procs:
        p.start()
    started = time.monotonic()
    try:
        while True:
            codes = [p.exitcode for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c is not None and c != 0]
            if failed:
                if (run_dir / RESULT_NAME).exists() or _rank0_finishes(procs[0], run_dir):
                    # Rank 0 wrote the result, so every step's all-reduce completed on every
                    # rank: a peer that died afterwards (gloo aborts a rank whose socket is
                    # reset while it tears down) cannot have changed the outcome.
                    return []
                return failed
            if all(c == 0 for c in codes):
                return []
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise TrainingFailedError(f"training did not finish within {timeout_s:.0f} s")
            time.sleep(POLL_S)
    finally:
        _stop(procs)


def _describe_failure(cfg: TrainConfig, failed: list[tuple[int, int]], ckpt_dir: Path) -> str:
    parts = []
    for rank, code in failed:
        why = "injected fault" if code == FAIL_EXIT_CODE else (
            f"signal {-code}" if code < 0 else f"exit status {code}")
        parts.append(f"rank {rank} ({cfg.slots[rank].flavor.short}) died ({why})")
    step = checkpoint_step(ckpt_dir)
    resume = (f"the last checkpoint (step {step}) is in {ckpt_dir}; rerun with the same "
              "checkpoint directory to resume") if step is not None else \
        "no checkpoint was written yet"
    return "; ".join(parts) + f"; the other ranks were stopped; {resume}"


def launch(cfg: TrainConfig, *, run_dir: str | os.PathLike[str] | None = None,
           max_restarts: int = 0, timeout_s: float | None = None) -> TrainResult:
    """Train ``cfg`` with one local process per device and return its result.

    Args:
        cfg: the job.
        run_dir: where ``result.json`` (and checkpoints, unless ``cfg.checkpoint_dir`` is set)
            go; a fresh temporary directory when ``None``.
        max_restarts: how many times to restart all ranks after a failure (torchrun's
            ``--max-restarts``); each restart resumes from the last checkpoint.
        timeout_s: give up (and stop all ranks) after this long per attempt.

    Raises:
        TrainingFailedError: a rank died and no restart was left.
    """
    out = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="tessera-train-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT_NAME).unlink(missing_ok=True)
    ckpt_dir = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else out / "checkpoints"
    for attempt in range(max_restarts + 1):
        failed = _run_group(cfg, out, attempt, timeout_s)
        if not failed:
            break
        message = _describe_failure(cfg, failed, ckpt_dir)
        if attempt == max_restarts:
            raise TrainingFailedError(message)
        if cfg.verbose:
            print(f"restarting all ranks ({attempt + 1}/{max_restarts}): {message}", flush=True)
    raw = json.loads((out / RESULT_NAME).read_text())
    return TrainResult(
        config=cfg, run_dir=out, emulated=bool(raw["emulated"]),
        flavors=tuple(raw["flavors"]), precisions=tuple(raw["precisions"]),
        speeds=tuple(raw["speeds"]), log=tuple(raw["log"]), restarts=int(raw["restarts"]),
        final_split=tuple(raw["final_split"]),
    )
