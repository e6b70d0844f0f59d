"""Checkpoints that let a job resume exactly where it stopped.

Under ``torchrun --max-restarts=K`` (or :func:`tessera.train.launcher.launch` with
``max_restarts``), any failed rank makes every worker restart. A restarted worker finds the last
checkpoint and continues from it. Because the synthetic data of a step depends only on
``(seed, step)`` and the checkpoint holds everything else that evolves (parameters, optimizer
momentum, the current split and the balancer's measurements, the loss scale and the per-step log),
the resumed run computes the same updates as an uninterrupted one. With a compressed exchange
that keeps error feedback (PowerSGD, 3LC) each rank's state differs; every rank hands it to rank
0 at a checkpoint and gets its own back on resume.

A checkpoint also records the data position (``samples_consumed``: how far into the example's
sample stream training got) and the world size and global batch it was written at, so a run
can resume at *another* size: :mod:`tessera.train.resize`.

Only rank 0 writes (all ranks hold identical parameters after every synchronised step). A write
goes to a temporary file that is then renamed over ``latest.pt``: a crash during the write leaves
the previous checkpoint intact, never a torn file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

CHECKPOINT_NAME = "latest.pt"


@dataclass(slots=True)
class TrainState:
    """What a checkpoint holds.

    Attributes:
        next_step: the first step not yet applied (the step to resume at).
        model: the model's ``state_dict``.
        optimizer: the optimizer's ``state_dict``.
        balancer: :meth:`OnlineBalancer.state_dict` (the split of ``next_step`` included).
        loss_scale: the fp16 loss scale.
        log: per-step records so far (JSON-able dicts), so the final report covers the whole run.
        samples_consumed: samples of the data stream trained on so far (the next step starts
            there); with a constant batch, ``next_step × global_batch``.
        world_size / global_batch: the ranks and samples per step of the run that wrote it.
        exchange: with ``--compress powersgd`` or ``3lc``, each rank's error-feedback state
            (:meth:`~tessera.train.compression.ThreeLcExchange.state_dict`), in rank order;
            ``None`` for the other schemes and for checkpoints written before it was kept.
    """

    next_step: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    balancer: dict[str, Any]
    loss_scale: float
    log: list[dict[str, Any]]
    samples_consumed: int
    world_size: int
    global_batch: int
    exchange: list[dict[str, Any]] | None = None


def checkpoint_path(directory: str | os.PathLike[str]) -> Path:
    """Where the latest checkpoint of a run lives."""
    return Path(directory) / CHECKPOINT_NAME


def save_checkpoint(directory: str | os.PathLike[str], state: TrainState) -> Path:
    """Write ``state`` atomically (temporary file, then rename)."""
    path = checkpoint_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(
        {
            "next_step": state.next_step,
            "model": state.model,
            "optimizer": state.optimizer,
            "balancer": state.balancer,
            "loss_scale": state.loss_scale,
            "log": state.log,
            "samples_consumed": state.samples_consumed,
            "world_size": state.world_size,
            "global_batch": state.global_batch,
            "exchange": state.exchange,
        },
        tmp,
    )
    os.replace(tmp, path)
    return path


def load_checkpoint(directory: str | os.PathLike[str] | None) -> TrainState | None:
    """The latest checkpoint in ``directory``, or ``None`` when there is none."""
    if directory is None:
        return None
    path = checkpoint_path(directory)
    if not path.exists():
        return None
    raw = torch.load(path, map_location="cpu", weights_only=False)
    # Checkpoints written before resizing existed ran at the balancer's batch and split.
    batch = int(raw.get("global_batch", raw["balancer"]["global_batch"]))
    return TrainState(
        next_step=int(raw["next_step"]),
        model=raw["model"],
        optimizer=raw["optimizer"],
        balancer=raw["balancer"],
        loss_scale=float(raw["loss_scale"]),
        log=list(raw["log"]),
        samples_consumed=int(raw.get("samples_consumed", int(raw["next_step"]) * batch)),
        world_size=int(raw.get("world_size", len(raw["balancer"]["split"]))),
        global_batch=batch,
        exchange=raw.get("exchange"),
    )


def checkpoint_step(directory: str | os.PathLike[str] | None) -> int | None:
    """The step a checkpoint in ``directory`` would resume at, or ``None``."""
    state = load_checkpoint(directory)
    return None if state is None else state.next_step


def parameters_of(directory: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The model parameters saved in a run's latest checkpoint (for comparisons)."""
    state = load_checkpoint(directory)
    if state is None:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    return {k: v.clone() for k, v in state.model.items()}


def model_state_equal(a: nn.Module | dict[str, torch.Tensor],
                      b: nn.Module | dict[str, torch.Tensor]) -> bool:
    """Bitwise equality of two models' (or state dicts') tensors."""
    sa = a.state_dict() if isinstance(a, nn.Module) else a
    sb = b.state_dict() if isinstance(b, nn.Module) else b
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
