"""The configuration of one heterogeneous data-parallel training run.

A :class:`TrainConfig` is validated once, when it is built (bad device lists, unknown examples
and impossible batches fail here with a :class:`~tessera.errors.TesseraError`), and then travels
unchanged to every rank -- pickled to spawned processes, or as JSON for ``torchrun``.

Split modes:

* ``planned`` -- start from the data-parallel planner's split for the example's planner model
  (catalog relative speeds when it cannot plan; see :mod:`tessera.train.prior`), then
  rebalance online from measured step times;
* ``equal`` -- plain data parallelism: ``B/N`` samples per rank, never rebalanced (the baseline);
* ``fixed`` -- an explicit split, never rebalanced (tests and reproductions).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tessera.errors import SpecError
from tessera.perf.compression import CompressionSpec, parse_compression
from tessera.train.balancer import BalancerConfig, equal_split
from tessera.train.devices import DeviceSlot, parse_devices, relative_speeds
from tessera.train.emulation import EmulationConfig, SpeedChange
from tessera.train.links import DEFAULT_LATENCY_US, EmulatedLink
from tessera.train.prior import (
    PLAN_MODELS,
    InitialSplit,
    SplitSource,
    check_plan_model,
    planned_split,
)
from tessera.train.stragglers import DEFAULT_FACTOR, Stragglers, check_straggler_options

SPLIT_MODES = ("planned", "equal", "fixed")
LR_SCALINGS = ("linear", "none")
DTYPES = ("float32", "float64")
EXAMPLE_NAMES = ("mlp", "cnn", "transformer", "wide-mlp")
"""Kept here (not imported from :mod:`tessera.train.examples`) so validation needs no torch."""


@dataclass(frozen=True, slots=True)
class FailAt:
    """Fault injection: rank ``rank`` dies in the middle of step ``step`` (first attempt only)."""

    step: int
    rank: int


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Everything a rank needs to train its share of one job.

    Attributes:
        example: which built-in example to train (``mlp``, ``cnn``, ``transformer``).
        devices: device list, ``FLAVOR:COUNT[,...]``; one rank per device.
        global_batch: samples per step over all ranks (kept fixed when rebalancing).
        steps: optimizer steps to run (the same on every rank).
        split: ``planned``, ``equal`` or ``fixed`` (see the module docstring).
        fixed_split: the local batches for ``split="fixed"``.
        plan_model: the planner model for the ``planned`` split's step 0; ``None`` takes the
            example's (:data:`~tessera.train.prior.PLAN_MODELS`).
        seed: seeds the model initialisation and the synthetic data.
        dtype: parameter and data type on CPU (``float64`` for exactness tests).
        lr / momentum: SGD hyper-parameters; ``lr`` is the rate at ``lr_batch`` samples.
        lr_batch: the global batch ``lr`` was chosen for; ``None`` = ``global_batch``. A run
            resumed or relaunched at another global batch keeps it (see ``lr_scaling``).
        lr_scaling: how the rate follows the global batch B: ``linear`` (``lr × B /
            lr_batch``, Goyal et al.'s rule, one of Pollux's) or ``none`` (``lr`` at any B).
        emulate: emulate heterogeneity by padding compute (``None``: when no GPU is usable).
        speeds: emulated relative speeds per rank; ``None`` derives them from the catalog.
        emulation: the emulated device model.
        speed_changes: emulated speed changes during the run.
        balancer: the online balancer's knobs.
        checkpoint_dir: where checkpoints go (resumed from if one is there).
        checkpoint_every: save a checkpoint after every this many steps (0: only at the end).
        fail_at: inject a rank failure (tests, demos).
        verbose: print one line per step and every rebalance (from rank 0).
        stragglers / straggler_factor: inject transient stragglers: each (rank, step) is
            ``straggler_factor`` times slower with probability ``stragglers``, drawn from
            ``seed`` (:mod:`tessera.train.stragglers`).
        coded / code_k: gradient-coded steps, any ``code_k`` (default n − 1) of n ranks decide
            a step exactly (:mod:`tessera.train.coded_step`).
        staleness: bounded staleness S: apply gradients up to S steps old from late ranks
            instead of waiting (:mod:`tessera.train.staleness`); 0 is the synchronous step.
        compress: gradient compression, ``none|fp16|bf16|powersgd[:rank=R]|3lc``
            (:mod:`tessera.train.compression`).
        link_gbps: emulate a link of this many Gb/s between ranks (``None``: no emulation;
            :mod:`tessera.train.links`); ``link_latency_us`` is its per-hop latency.
    """

    example: str
    devices: str
    global_batch: int = 48
    steps: int = 30
    split: str = "planned"
    fixed_split: tuple[int, ...] | None = None
    plan_model: str | None = None
    seed: int = 0
    dtype: str = "float32"
    lr: float = 0.05
    momentum: float = 0.9
    lr_batch: int | None = None
    lr_scaling: str = "linear"
    emulate: bool | None = None
    speeds: tuple[float, ...] | None = None
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    speed_changes: tuple[SpeedChange, ...] = ()
    balancer: BalancerConfig = field(default_factory=BalancerConfig)
    checkpoint_dir: str | None = None
    checkpoint_every: int = 5
    fail_at: FailAt | None = None
    verbose: bool = False
    stragglers: float = 0.0
    straggler_factor: float = DEFAULT_FACTOR
    coded: bool = False
    code_k: int | None = None
    staleness: int = 0
    compress: str = "none"
    link_gbps: float | None = None
    link_latency_us: float = DEFAULT_LATENCY_US

    def __post_init__(self) -> None:
        if self.example not in EXAMPLE_NAMES:
            raise SpecError(
                f"unknown example {self.example!r}; choose one of: {', '.join(EXAMPLE_NAMES)}"
            )
        slots = parse_devices(self.devices)
        n = len(slots)
        if self.split not in SPLIT_MODES:
            raise SpecError(f"split must be one of {', '.join(SPLIT_MODES)}, got {self.split!r}")
        if self.dtype not in DTYPES:
            raise SpecError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.steps < 1:
            raise SpecError(f"steps must be ≥ 1, got {self.steps}")
        if self.global_batch < n * self.balancer.min_batch:
            raise SpecError(
                f"global batch {self.global_batch} is smaller than the {n} ranks need "
                f"({self.balancer.min_batch} sample(s) each)"
            )
        if self.split == "fixed":
            if self.fixed_split is None or len(self.fixed_split) != n:
                raise SpecError(f"split 'fixed' needs fixed_split with {n} entries")
            if sum(self.fixed_split) != self.global_batch or min(self.fixed_split) < 1:
                raise SpecError(
                    f"fixed split {list(self.fixed_split)} must be positive and sum to "
                    f"{self.global_batch}"
                )
        if self.plan_model is not None:
            if self.split != "planned":
                raise SpecError(f"a planner model only applies to split 'planned', not "
                                f"{self.split!r}")
            check_plan_model(self.plan_model)
        if self.speeds is not None and (len(self.speeds) != n or min(self.speeds) <= 0):
            raise SpecError(f"speeds needs {n} positive entries, got {list(self.speeds)}")
        for c in self.speed_changes:
            if c.rank >= n:
                raise SpecError(f"speed change names rank {c.rank}; the job has {n} ranks")
        if self.fail_at is not None and self.fail_at.rank >= n:
            raise SpecError(f"fail_at names rank {self.fail_at.rank}; the job has {n} ranks")
        if self.checkpoint_every < 0:
            raise SpecError("checkpoint_every must be ≥ 0")
        if self.lr_scaling not in LR_SCALINGS:
            raise SpecError(f"lr_scaling must be one of {', '.join(LR_SCALINGS)}, got "
                            f"{self.lr_scaling!r}")
        if self.lr_batch is not None and self.lr_batch < 1:
            raise SpecError(f"lr_batch must be ≥ 1, got {self.lr_batch}")
        check_straggler_options(ranks=n, rate=self.stragglers, factor=self.straggler_factor,
                                coded=self.coded, code_k=self.code_k, staleness=self.staleness)
        if (self.coded or self.staleness) and (self.compress != "none"
                                               or self.link_gbps is not None):
            raise SpecError("--compress and --link-gbps act on the synchronous all-reduce; coded "
                            "and stale steps exchange point to point: use one or the other")
        if self.fail_at is not None and self.step_mode != "sync":
            raise SpecError(f"--fail-at injects a fault into the synchronous step only; "
                            f"{self.step_mode} steps would ignore it: drop --fail-at or "
                            f"--coded/--staleness")
        parse_compression(self.compress)
        if self.link_gbps is not None:
            EmulatedLink(self.link_gbps, self.link_latency_us)

    @property
    def compression(self) -> CompressionSpec:
        """The parsed ``compress`` value."""
        return parse_compression(self.compress)

    @property
    def link(self) -> EmulatedLink | None:
        """The emulated link between ranks, if any."""
        if self.link_gbps is None:
            return None
        return EmulatedLink(self.link_gbps, self.link_latency_us)

    @property
    def slots(self) -> tuple[DeviceSlot, ...]:
        """One device slot per rank."""
        return parse_devices(self.devices)

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.slots)

    @property
    def rebalance(self) -> bool:
        """Only the ``planned`` mode rebalances online (and only with synchronous steps)."""
        return self.split == "planned" and self.step_mode == "sync"

    @property
    def straggler_injection(self) -> Stragglers:
        """The run's injected stragglers (rate 0: none)."""
        return Stragglers(self.stragglers, self.straggler_factor, self.seed)

    @property
    def code_size(self) -> int:
        """k of the coded mode: ``code_k``, default n − 1 (one straggler tolerated)."""
        return self.code_k if self.code_k is not None else self.world_size - 1

    @property
    def step_mode(self) -> str:
        """``coded`` (k < n), ``stale`` (staleness > 0 without a usable code) or ``sync``."""
        if self.coded and self.code_size < self.world_size:
            return "coded"
        return "stale" if self.staleness > 0 else "sync"

    def emulated_speeds(self) -> tuple[float, ...]:
        """Relative speed per rank: the explicit ``speeds`` or the catalog's ratios."""
        return self.speeds if self.speeds is not None else relative_speeds(self.slots)

    @property
    def base_batch(self) -> int:
        """The global batch ``lr`` is given for (``lr_batch``, else ``global_batch``)."""
        return self.lr_batch if self.lr_batch is not None else self.global_batch

    def lr_at(self, batch: int) -> float:
        """The learning rate at a global batch of ``batch`` samples under ``lr_scaling``."""
        if self.lr_scaling == "none" or batch == self.base_batch:
            return self.lr  # exactly the configured rate, not lr·B/B rounded
        return self.lr * batch / self.base_batch

    def scaled_lr(self) -> float:
        """The learning rate at this run's ``global_batch``."""
        return self.lr_at(self.global_batch)

    @property
    def planner_model(self) -> str:
        """The planner model step 0 of a ``planned`` split is planned as."""
        return self.plan_model or PLAN_MODELS[self.example]

    def initial_split_info(self) -> InitialSplit:
        """The local batches of step 0, with where they came from."""
        if self.split == "fixed":
            assert self.fixed_split is not None
            return InitialSplit(self.fixed_split, SplitSource.FIXED, "given explicitly")
        if self.split == "equal":
            return InitialSplit(equal_split(self.global_batch, self.world_size),
                                SplitSource.EQUAL, "plain data parallelism, B/N per rank")
        # Planned from flavors and profiles only, never from the emulated truth: with explicit
        # ``speeds`` the balancer has to discover them from measurements.
        return planned_split(self.slots, self.global_batch, self.planner_model,
                             self.balancer.min_batch)

    def initial_split(self) -> tuple[int, ...]:
        """The local batches of step 0."""
        return self.initial_split_info().split

    def with_changes(self, **changes: Any) -> TrainConfig:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)

    def to_json(self) -> str:
        """Serialise for ``torchrun`` workers (:func:`from_json` reads it back)."""
        return json.dumps(asdict(self))


def from_json(text: str) -> TrainConfig:
    """Rebuild a :class:`TrainConfig` written by :meth:`TrainConfig.to_json`."""
    raw = json.loads(text)
    raw["emulation"] = EmulationConfig(**raw["emulation"])
    raw["balancer"] = BalancerConfig(**raw["balancer"])
    raw["speed_changes"] = tuple(SpeedChange(**c) for c in raw["speed_changes"])
    raw["fail_at"] = FailAt(**raw["fail_at"]) if raw["fail_at"] else None
    for key in ("fixed_split", "speeds"):
        if raw[key] is not None:
            raw[key] = tuple(raw[key])
    return TrainConfig(**raw)
