"""The training loop every rank runs, and the single-process reference it must agree with.

One step on rank i, in order:

1. take the split ``b_1..b_N`` for this step from the balancer (identical on every rank);
2. take this rank's slice of the step's global batch from the sample stream: samples
   ``[c + offset_i, c + offset_i + b_i)`` after ``c`` samples consumed so far;
3. forward and backward on the slice (in the rank's precision on GPUs);
4. on an emulated device, sleep until the rank's nominal compute time has passed;
5. all-reduce the ``b_i/B``-weighted gradient together with the step's compute times;
6. optimizer step (skipped everywhere if any fp16 rank overflowed);
7. feed the compute times to the balancer, which may change the split of the next step;
8. every ``checkpoint_every`` steps, rank 0 saves a checkpoint (with every rank's compression
   state, gathered).

Every rank runs the same number of steps, so no rank waits in a collective that others never
reach. The loop works with processes started by :mod:`tessera.train.launcher` and with
``torchrun`` (``python -m tessera.train.worker --config cfg.json --run-dir DIR``): it reads
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` and ``TORCHELASTIC_RESTART_COUNT``,
and, from the live service, the run's size (:func:`tessera.train.resize.fit_to_launch`).

With ``--coded`` or ``--staleness S`` a stepper from :mod:`tessera.train.step_modes` runs the
step instead, with point-to-point messages in place of the all-reduce; injected stragglers
(``--stragglers``) slow step 4 in every mode.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tessera.progress_report import progress
from tessera.train.balancer import OnlineBalancer
from tessera.train.checkpoint import TrainState, load_checkpoint, save_checkpoint
from tessera.train.compression import (
    GradientExchange,
    gather_states,
    make_exchange,
    restore_state,
)
from tessera.train.config import TrainConfig, from_json
from tessera.train.ddp import LossScaler, autocast_for, broadcast_parameters, sync_gradients
from tessera.train.devices import Precision
from tessera.train.emulation import Emulator
from tessera.train.examples import Example, build_model, get_example, loss_fn, sample_range
from tessera.train.resize import Resize, fit_to_launch, resume_balancer
from tessera.train.step_modes import make_stepper, slow_down

FAIL_EXIT_CODE = 17
"""Exit status of a rank killed by fault injection (``TrainConfig.fail_at``)."""
STOPPED_EXIT_CODE = 143
"""Exit status of a rank that stopped on request (SIGTERM) after checkpointing (128 + 15)."""
GRACE_VAR = "TESSERA_GRACE_S"
"""Set by the live service: the job has this long after SIGTERM to checkpoint and exit."""


class StopRequested(Exception):
    """All ranks agreed to stop after a step (one of them got SIGTERM); rank 0 checkpointed.

    Attributes:
        next_step: the step the checkpoint resumes at.
    """

    def __init__(self, next_step: int) -> None:
        super().__init__(f"stopped on request; the checkpoint resumes at step {next_step}")
        self.next_step = next_step


class StopSignal:
    """SIGTERM as a request to stop at the next step boundary, not a kill.

    The live service stops a run (preemption, move, resize) with SIGTERM and expects a
    checkpoint. A rank cannot checkpoint mid-step, and ranks receive the signal at slightly
    different times, so the handler only raises a flag; the flag travels in the step's
    all-reduce (:func:`~tessera.train.ddp.sync_gradients`), every rank sees the same answer,
    and all stop after the same step.
    """

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> StopSignal:
        signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requested = True


RESULT_NAME = "result.json"
PROCESS_GROUP_TIMEOUT = timedelta(seconds=120)


def local_device_index(visible_gpus: int, local_rank: int, local_world_size: int) -> int | None:
    """The CUDA device this rank uses, or ``None`` when this node cannot give it one.

    Ranks are counted per node (``LOCAL_RANK`` of ``LOCAL_WORLD_SIZE``), never against the
    whole gang: a two-node gang of 4 + 4 ranks needs 4 GPUs per node, not 8. A rank that sees
    exactly one GPU was isolated by its launcher (Ray sets ``CUDA_VISIBLE_DEVICES`` per rank
    actor) and uses it whatever its local rank; otherwise local rank ``i`` uses device ``i``.
    """
    if visible_gpus == 1:
        return 0
    if visible_gpus >= local_world_size and 0 <= local_rank < visible_gpus:
        return local_rank
    return None


def _local_ranks(cfg: TrainConfig) -> tuple[int, int]:
    """(``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) from the environment; one node by default."""
    rank = int(os.environ.get("RANK", "0"))
    return (int(os.environ.get("LOCAL_RANK", rank)),
            int(os.environ.get("LOCAL_WORLD_SIZE", cfg.world_size)))


def use_emulation(cfg: TrainConfig) -> bool:
    """Emulate when asked to, or when this node has no GPU for this rank."""
    if cfg.emulate is not None:
        return cfg.emulate
    if not torch.cuda.is_available():
        return True
    return local_device_index(torch.cuda.device_count(), *_local_ranks(cfg)) is None


def _dtype(cfg: TrainConfig) -> torch.dtype:
    return torch.float64 if cfg.dtype == "float64" else torch.float32


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """SGD with momentum at the run's scaled rate: deterministic, with state worth
    checkpointing."""
    return torch.optim.SGD(model.parameters(), lr=cfg.scaled_lr(), momentum=cfg.momentum)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every parameter group's rate (a loaded optimizer state brings its old one)."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def _print_step(record: dict[str, Any]) -> None:
    times = " ".join(f"{1000 * t:6.1f}" for t in record["compute_s"])
    print(f"step {record['step']:4d}  split {record['split']}  compute_ms [{times}]  "
          f"step_ms {1000 * record['wall_s']:6.1f}  loss {record['loss']:.4f}", flush=True)
    ev = record["rebalance"]
    if ev is not None:
        gain = 1 - ev["predicted_new_s"] / ev["predicted_old_s"]
        print(f"  rebalance after step {ev['step']}: {ev['old_split']} -> {ev['new_split']} "
              f"(predicted {1000 * ev['predicted_old_s']:.1f} -> "
              f"{1000 * ev['predicted_new_s']:.1f} ms, -{gain:.0%}): {ev['reason']}", flush=True)


def train_loop(cfg: TrainConfig, rank: int, world_size: int, run_dir: Path,
               restart_count: int = 0, start_split: tuple[int, ...] | None = None,
               stop: StopSignal | None = None) -> None:
    """Run (or resume) the job on this rank; rank 0 writes checkpoints and ``result.json``.

    ``start_split``: the split the launcher planned (``TESSERA_LOCAL_BATCH``), used instead of
    the configuration's step-0 split unless an exact resume brings its own balancer. A
    checkpoint written at another world size or global batch is resumed at this run's
    (:mod:`tessera.train.resize`). With ``stop``, a SIGTERM on any rank ends the run after the
    current step with a checkpoint (:class:`StopRequested`).

    Raises:
        StopRequested: the run stopped on request before its last step.
    """
    emulate = use_emulation(cfg)
    run = _start_run(cfg, rank, world_size, run_dir, start_split, emulate)
    if world_size > 1:
        broadcast_parameters(run.model)
    stepper = make_stepper(run)  # coded / bounded-staleness steps; None: synchronous
    for step in range(run.start, cfg.steps):
        if stepper is None:
            record, stop_now = _train_step(run, step, restart_count, stop)
        else:
            record, stop_now = stepper.step(step, restart_count,
                                            stop is not None and stop.requested)
        run.log.append(record)
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            run.checkpoint(step + 1)  # every rank: the compression state is gathered
        if rank == 0 and cfg.verbose:
            _print_step(record)
        if rank == 0:  # to tessera serve, when it launched us (a no-op otherwise; <= 1/s)
            progress(steps=step + 1, samples=run.samples,
                     local_batch=cfg.global_batch / world_size)  # (the mean rank's share)
        if stop_now and step + 1 < cfg.steps:
            run.checkpoint(step + 1)
            if rank == 0:
                print(f"stopped on request after step {step}; checkpoint in {run.ckpt_dir}",
                      flush=True)
            if stepper is not None:
                stepper.close()
            raise StopRequested(step + 1)
    if stepper is not None:
        stepper.close()
    run.checkpoint(cfg.steps)
    if rank == 0:
        result = {
            "emulated": emulate, "speeds": list(cfg.emulated_speeds()),
            "precisions": [str(s.precision) for s in cfg.slots],
            "flavors": [s.flavor.short for s in cfg.slots], "restarts": restart_count,
            "final_split": list(run.balancer.split) if stepper is None or not run.log
            else list(run.log[-1]["split"]), "log": run.log,  # coded: per-rank loads
        }
        tmp = run_dir / (RESULT_NAME + ".tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, run_dir / RESULT_NAME)


@dataclass
class _Run:
    """One rank's training state: what a step reads and updates, and what a checkpoint saves.

    ``start`` is the first step to run (after a resume, the checkpoint's next step);
    ``samples`` the samples of the stream consumed so far (every rank's, the global count).
    """

    cfg: TrainConfig
    rank: int
    world_size: int
    device: torch.device
    precision: Precision
    example: Example
    model: nn.Module
    optimizer: torch.optim.Optimizer
    balancer: OnlineBalancer
    scaler: LossScaler
    ckpt_dir: Path
    emulator: Emulator | None
    log: list[dict[str, Any]] = field(default_factory=list)
    start: int = 0
    samples: int = 0
    resize: Resize | None = None
    exchange: GradientExchange | None = None

    def checkpoint(self, next_step: int) -> None:
        """Save everything a resume at ``next_step`` needs. Every rank calls this at the same
        step: rank 0 gathers the ranks' compression state (a collective with PowerSGD and
        3LC) and writes."""
        exchange = gather_states(self.exchange, self.world_size)
        if self.rank != 0:
            return
        save_checkpoint(self.ckpt_dir, TrainState(
            next_step, self.model.state_dict(), self.optimizer.state_dict(),
            self.balancer.state_dict(), self.scaler.scale, self.log, self.samples,
            self.world_size, self.cfg.global_batch, exchange))


def _start_run(cfg: TrainConfig, rank: int, world_size: int, run_dir: Path,
               start_split: tuple[int, ...] | None, emulate: bool) -> _Run:
    """This rank's model, optimizer, balancer and scaler, fresh or resumed from a checkpoint."""
    device = torch.device("cpu")
    if not emulate:
        index = local_device_index(torch.cuda.device_count(), *_local_ranks(cfg))
        device = torch.device("cuda", index or 0)
        torch.cuda.set_device(device)
    precision = cfg.slots[rank].precision
    example = get_example(cfg.example)
    model = build_model(example, cfg.seed, _dtype(cfg)).to(device)
    run = _Run(
        cfg, rank, world_size, device, precision, example, model, make_optimizer(model, cfg),
        OnlineBalancer(cfg.global_batch, start_split or cfg.initial_split(), cfg.balancer),
        LossScaler(enabled=device.type == "cuda" and precision is Precision.FP16),
        Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else run_dir / "checkpoints",
        Emulator(cfg.emulated_speeds(), cfg.emulation, cfg.speed_changes) if emulate else None,
    )
    run.exchange = make_exchange(cfg.compression, [p.shape for p in model.parameters()
                                                   if p.requires_grad])
    state = load_checkpoint(run.ckpt_dir)
    if state is not None:
        run.model.load_state_dict(state.model)
        run.optimizer.load_state_dict(state.optimizer)
        set_lr(run.optimizer, cfg.scaled_lr())
        run.balancer, run.resize = resume_balancer(state, cfg, world_size, run.balancer)
        run.scaler.scale = state.loss_scale if run.scaler.enabled else 1.0
        run.log, run.start, run.samples = state.log, state.next_step, state.samples_consumed
        lost = restore_state(run.exchange, state.exchange, rank, world_size, device)
        if lost is not None and rank == 0:
            print(f"compression restarts with zero error feedback: {lost}", flush=True)
        if rank == 0 and cfg.verbose:
            print(f"resumed from checkpoint at step {run.start} ({run.ckpt_dir})", flush=True)
            if run.resize is not None:
                print(run.resize.describe(), flush=True)
    return run


def _train_step(run: _Run, step: int, restart_count: int, stop: StopSignal | None,
                ) -> tuple[dict[str, Any], bool]:
    """Steps 1-7 of the module docstring on this rank: the step's log record, and whether
    every rank agreed to stop after it."""
    cfg, rank = run.cfg, run.rank
    t0 = time.perf_counter()
    split = run.balancer.split
    local, offset = split[rank], sum(split[:rank])
    x, y = sample_range(run.example, cfg.seed, run.samples + offset, local, _dtype(cfg))
    x, y = x.to(run.device), y.to(run.device)
    run.optimizer.zero_grad(set_to_none=True)
    with autocast_for(run.precision, run.device):
        loss = loss_fn(run.model(x), y)
    (loss * run.scaler.scale).backward()
    if cfg.fail_at is not None and (step, rank) == (cfg.fail_at.step, cfg.fail_at.rank) \
            and restart_count == 0:
        sys.stdout.flush()
        os._exit(FAIL_EXIT_CODE)  # injected fault: die mid-step, before the all-reduce
    params = [p for p in run.model.parameters() if p.requires_grad]
    overflow = run.scaler.unscale_and_check(params)
    if run.emulator is not None:
        compute_s = run.emulator.pad(step, rank, local, t0)
    else:
        torch.cuda.synchronize(run.device)
        compute_s = time.perf_counter() - t0
    compute_s = slow_down(cfg, step, rank, t0, compute_s)  # injected straggler, if any
    extras = sync_gradients(params, rank=rank, world_size=run.world_size, local_batch=local,
                            global_batch=cfg.global_batch, compute_s=compute_s,
                            local_loss=float(loss.detach()), overflow=overflow,
                            stop=stop is not None and stop.requested,
                            exchange=run.exchange, link=cfg.link)
    if not extras.overflow:
        run.optimizer.step()
    run.scaler.update(extras.overflow)
    run.samples += cfg.global_batch
    event = run.balancer.observe(step, extras.compute_s) if cfg.rebalance else None
    record: dict[str, Any] = {
        "step": step, "split": list(split), "compute_s": list(extras.compute_s),
        "loss": extras.loss, "skipped": extras.overflow, "attempt": restart_count,
        "rebalance": event.to_json() if event is not None else None,
        "global_batch": cfg.global_batch, "lr": run.optimizer.param_groups[0]["lr"],
        "resize": run.resize.to_json() if run.resize is not None and step == run.start
        else None,
        "sent_bytes": extras.sent_bytes, "exchange_s": extras.exchange_s,
    }
    record["wall_s"] = time.perf_counter() - t0  # the synchronous step, as rank 0 saw it
    record["end_s"] = time.time()  # wall clock, to line steps up with a service's events
    return record, extras.stop


def run_worker(rank: int, world_size: int, cfg: TrainConfig, run_dir: str,
               restart_count: int = 0, stop: StopSignal | None = None) -> None:
    """Join the process group (from ``MASTER_ADDR``/``MASTER_PORT``), train, leave.

    Raises:
        StopRequested: ``stop`` was signalled; every rank stopped after the same step.
    """
    torch.set_num_threads(1)  # ranks share the CPU; one thread each keeps timings honest
    distributed = world_size > 1
    if distributed:
        backend = "gloo" if use_emulation(cfg) else "nccl"
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=PROCESS_GROUP_TIMEOUT)
    try:
        cfg, split = fit_to_launch(cfg, world_size)
        stopped: StopRequested | None = None
        try:
            train_loop(cfg, rank, world_size, Path(run_dir), restart_count, split, stop)
        except StopRequested as e:  # every rank stopped after the same step
            stopped = e
        if distributed:
            # Leave together: a rank that closed its sockets while a peer still read the last
            # all-reduce would reset the peer's connection.
            dist.barrier()
        if stopped is not None:
            raise stopped
    finally:
        if distributed:
            dist.destroy_process_group()


def reference_training(cfg: TrainConfig,
                       phases: Sequence[tuple[int, int]] | None = None) -> nn.Module:
    """Single-process training on the full global batch of every step (the ground truth).

    Heterogeneous data parallelism with correctly weighted gradients must produce the same
    parameters as this, whatever the split and however many ranks.

    Args:
        cfg: the run (example, seed, dtype, ``lr`` at ``lr_batch`` and its scaling rule).
        phases: ``((steps, global_batch), ...)``: the batch schedule of a run resized along
            the way, consecutive on the sample stream; default ``cfg.steps`` at
            ``cfg.global_batch``.
    """
    example = get_example(cfg.example)
    model = build_model(example, cfg.seed, _dtype(cfg))
    optimizer = make_optimizer(model, cfg)
    samples = 0
    for steps, batch in phases or ((cfg.steps, cfg.global_batch),):
        set_lr(optimizer, cfg.lr_at(batch))
        for _ in range(steps):
            x, y = sample_range(example, cfg.seed, samples, batch, _dtype(cfg))
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
            samples += batch
    return model


def main(argv: list[str] | None = None) -> None:
    """``torchrun`` entry point: configuration from a JSON file, ranks from the environment."""
    parser = argparse.ArgumentParser(description="Tessera heterogeneous data-parallel worker")
    parser.add_argument("--config", required=True, help="TrainConfig as JSON")
    parser.add_argument("--run-dir", required=True, help="directory for result.json")
    args = parser.parse_args(argv)
    cfg = from_json(Path(args.config).read_text())
    Path(args.run_dir).mkdir(parents=True, exist_ok=True)
    # Under the live service SIGTERM means "checkpoint and exit"; elsewhere (torchrun, the
    # local launcher) it keeps its default: a peer's failure must not wait for a step boundary.
    stop = StopSignal().install() if GRACE_VAR in os.environ else None
    try:
        run_worker(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
                   cfg, args.run_dir, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                   stop)
    except StopRequested as e:
        print(str(e), flush=True)
        sys.stderr.flush()
        # At once: tearing down an interpreter with torch loaded can take seconds on a busy
        # machine, and the grace period is counting. The checkpoint is already on disk.
        os._exit(STOPPED_EXIT_CODE)


if __name__ == "__main__":
    main()
