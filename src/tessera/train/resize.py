"""Resuming a run at another world size and global batch (elastic jobs, Pollux/Sia style).

An elastic job grows and shrinks by checkpoint-restart: the scheduler stops it (SIGTERM, the
job checkpoints), then launches it again on ``W₂`` GPUs at a global batch ``B₂``. What a run
written at ``W₁``/``B₁`` needs to continue there:

* **model and optimizer state** -- restored as is (parameters are the same on every rank;
  momentum buffers are per parameter, not per rank, so they carry over to any world size);
* **the data position** -- the checkpoint's ``samples_consumed``. Data is a sample *stream*
  (:func:`tessera.train.examples.sample_range`): the step after the resize trains on samples
  ``[c, c + B₂)``, whatever the split and however many ranks share it;
* **the split** -- re-planned for the new ranks (the service's ``TESSERA_LOCAL_BATCH``, else the
  configuration's step-0 split); the old balancer's measurements belong to other ranks and
  another batch, so they are dropped. A resume at the *same* size keeps its balancer;
* **the learning rate** -- follows the batch by the configuration's ``lr_scaling``: ``linear``
  sets ``lr × B₂ / lr_batch`` (Goyal et al.'s rule, which Pollux offers next to AdaScale),
  ``none`` keeps ``lr``. Momentum is kept as it was.

**The guarantee.** Because a step's samples are fixed by the stream position and the gradient
is the ``b_i/B``-weighted sum over ranks (:mod:`tessera.train.ddp`), the update of every step
is the single-process update on the same global batch. A run resized from ``W₁`` to ``W₂`` at
step k therefore ends with the parameters of a run that had ``W₂`` ranks from the start and the
same batch schedule, up to floating-point summation order (in float64: below 1e-9 after a few
steps; tested in ``tests/train/test_resize.py``).

Under the live service the new size arrives in the environment of each rank
(:func:`fit_to_launch`): ``WORLD_SIZE``, ``TESSERA_FLAVOR`` (which device this rank is),
``TESSERA_GLOBAL_BATCH`` (the run's global batch) and ``TESSERA_LOCAL_BATCH`` (this rank's share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tessera.errors import SpecError
from tessera.train.balancer import OnlineBalancer, equal_split
from tessera.train.checkpoint import TrainState
from tessera.train.config import TrainConfig

GLOBAL_BATCH_VAR = "TESSERA_GLOBAL_BATCH"
LOCAL_BATCH_VAR = "TESSERA_LOCAL_BATCH"
FLAVOR_VAR = "TESSERA_FLAVOR"
CHECKPOINT_DIR_VAR = "TESSERA_CHECKPOINT_DIR"


@dataclass(frozen=True, slots=True)
class Resize:
    """A run resumed at another size than its checkpoint was written at.

    Attributes:
        step: the first step of the resized run.
        samples_consumed: the stream position it resumes at.
        old_world_size / new_world_size: ranks before and after.
        old_global_batch / new_global_batch: samples per step before and after.
        lr: the learning rate the resized run uses.
    """

    step: int
    samples_consumed: int
    old_world_size: int
    new_world_size: int
    old_global_batch: int
    new_global_batch: int
    lr: float

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "samples_consumed": self.samples_consumed,
                "old_world_size": self.old_world_size, "new_world_size": self.new_world_size,
                "old_global_batch": self.old_global_batch,
                "new_global_batch": self.new_global_batch, "lr": self.lr}

    def describe(self) -> str:
        return (f"resized at step {self.step} (sample {self.samples_consumed}): "
                f"{self.old_world_size} → {self.new_world_size} ranks, global batch "
                f"{self.old_global_batch} → {self.new_global_batch}, lr {self.lr:g}")


def _gather_ints(value: int, world_size: int) -> tuple[int, ...]:
    local = torch.tensor([value], dtype=torch.int64)
    if world_size == 1:
        return (value,)
    parts = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(parts, local)
    return tuple(int(p.item()) for p in parts)


def launched_split(cfg: TrainConfig, world_size: int) -> tuple[int, ...] | None:
    """The per-rank batches the service planned (``TESSERA_LOCAL_BATCH`` on every rank).

    Each rank knows only its own; they are all-gathered so every rank's balancer starts from
    the same split. ``None`` when the launch carried none.

    Raises:
        SpecError: the batches do not add up to the configured global batch.
    """
    mine = os.environ.get(LOCAL_BATCH_VAR)
    if mine is None:
        return None
    split = _gather_ints(int(mine), world_size)
    if sum(split) != cfg.global_batch:
        raise SpecError(f"{LOCAL_BATCH_VAR} across ranks {split} sums to {sum(split)}, "
                        f"not the global batch {cfg.global_batch}")
    return split


def _devices_of_launch(cfg: TrainConfig, world_size: int) -> str:
    """A device list with one entry per rank of this launch, from each rank's flavor."""
    mine = os.environ.get(FLAVOR_VAR)
    if mine is None:
        raise SpecError(
            f"launched with WORLD_SIZE={world_size} but the configuration lists "
            f"{cfg.world_size} device(s) ({cfg.devices}) and no {FLAVOR_VAR} names this rank's "
            f"device; give a device list of {world_size}")
    flavors: list[Any] = [None] * world_size
    if world_size > 1:
        dist.all_gather_object(flavors, mine)
    else:
        flavors = [mine]
    runs: list[list[Any]] = []
    for f in flavors:
        if runs and runs[-1][0] == f:
            runs[-1][1] += 1
        else:
            runs.append([f, 1])
    return ",".join(f"{f}:{n}" for f, n in runs)


def fit_to_launch(cfg: TrainConfig, world_size: int
                  ) -> tuple[TrainConfig, tuple[int, ...] | None]:
    """The configuration of this launch, and the split the launcher planned (if any).

    A service launch may run the job at another size than its configuration names. A
    configuration without a ``checkpoint_dir`` checkpoints in ``TESSERA_CHECKPOINT_DIR`` (the
    directory every run of the job gets, so a resumed or resized run finds it). The global
    batch comes from ``TESSERA_GLOBAL_BATCH`` (``lr_batch`` stays the configured batch, so the
    learning rate scales from it), and a world size other than the device list's takes its
    devices from each rank's ``TESSERA_FLAVOR``. Then per-rank emulated ``speeds`` (given for
    other ranks) fall back to the catalog's, and speed changes or an injected fault naming a
    rank the launch lacks are dropped. A ``fixed`` split takes the launch's split (equal
    shares without one). Call after the process group is up (ranks all-gather).

    Raises:
        SpecError: another world size with no flavors to build devices from, a malformed
            ``TESSERA_GLOBAL_BATCH``, or local batches that do not add up.
    """
    changes: dict[str, Any] = {}
    ckpt = os.environ.get(CHECKPOINT_DIR_VAR)
    if cfg.checkpoint_dir is None and ckpt:
        changes["checkpoint_dir"] = ckpt
    text = os.environ.get(GLOBAL_BATCH_VAR)
    if text is not None:
        try:
            batch = int(text)
        except ValueError:
            raise SpecError(f"{GLOBAL_BATCH_VAR}={text[:32]!r} is not an integer") from None
        if batch != cfg.global_batch:
            changes |= {"global_batch": batch, "lr_batch": cfg.base_batch}
    if world_size != cfg.world_size:
        changes |= {
            "devices": _devices_of_launch(cfg, world_size), "speeds": None,
            "speed_changes": tuple(c for c in cfg.speed_changes if c.rank < world_size),
            "fail_at": cfg.fail_at if cfg.fail_at and cfg.fail_at.rank < world_size else None,
        }
    if (set(changes) - {"checkpoint_dir"}) and cfg.split == "fixed":
        changes["fixed_split"] = equal_split(changes.get("global_batch", cfg.global_batch),
                                             world_size)
    fitted = cfg.with_changes(**changes) if changes else cfg
    split = launched_split(fitted, world_size)
    if split is not None and fitted.split == "fixed" and split != fitted.fixed_split:
        fitted = fitted.with_changes(fixed_split=split)
    return fitted, split


def resume_balancer(state: TrainState, cfg: TrainConfig, world_size: int,
                    fresh: OnlineBalancer) -> tuple[OnlineBalancer, Resize | None]:
    """The balancer a resumed run continues with, and the resize, if the size changed.

    The checkpointed balancer when the world size and the global batch are the checkpoint's
    (an exact resume); otherwise ``fresh`` (the split re-planned for the new ranks) and a
    :class:`Resize` describing the change.
    """
    if state.world_size == world_size and state.global_batch == cfg.global_batch:
        return OnlineBalancer.from_state_dict(state.balancer), None
    return fresh, Resize(state.next_step, state.samples_consumed, state.world_size, world_size,
                         state.global_batch, cfg.global_batch, cfg.scaled_lr())
