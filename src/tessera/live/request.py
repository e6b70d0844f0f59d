"""What a user submits: a job request, validated strictly, and its conversion for the core.

A request is written in YAML (``tessera submit job.yaml``) or sent as JSON to the API. Field
names follow Kueue where Kueue has one (queue, flavors in preference order, priority)::

    name: resnet-sweep-3
    queue: vision              # the tenant queue (defaults to the token's queue)
    command: python train.py --epochs 3     # a shell line, or a list of argv strings
    gpus: 4
    global_batch: 256           # optional: samples per optimizer step over all ranks (at
                                # least one per rank), split into TESSERA_LOCAL_BATCH
                                # per rank (tessera.live.batches)
    flavors: [A100-80GB, V100]  # most preferred first; empty = any flavor
    priority: 1.0
    priority_class: high        # optional: a WorkloadPriorityClass of the tenancy; its value
                                # orders jobs under quotas (who may preempt whom)
    max_retries: 2
    checkpoint_dir: /shared/ckpt/resnet-sweep-3
    requires_locality: true     # the gang must sit on one node
    job_type: ResNet-50 (batch size 64)   # optional: a profiled model, for speed-aware policies
    expected_duration_s: 600    # optional hint for size-aware policies
    max_runtime_s: 7200         # optional: a run still going after this is stopped and fails
    parallelism: 3d             # optional (default data): plan tensor x pipeline x data
                                # parallelism for a layer-wise model (model: llama-7b, ...)
                                # and export each rank's stage/TP/DP role (docs/live.md)
    exclusive: false            # optional: may share its GPUs with another job (a packing
                                # policy's co-location); default true, and false is accepted
                                # only on a queue whose config says sharing: true
    memory_gib: 12              # optional: per-GPU memory estimate; a pair must fit together
    host:                       # optional: CPU cores and host memory (default: the
      cpus: 6                   # GPU-proportional share of the server); 1.5 or 1500m
      memory: 48Gi              # 48Gi, 512Mi, 64G, or a bare number of GiB
      per: gpu                  # gpu (default: each GPU's worth) or job (the total)
    power_limit_w: 200          # optional: per-GPU power limit for each run, set through NVML
                                # where the run holds its GPUs alone (docs/energy.md, Live)

A **CPU-only** job (preprocessing, evaluation) says ``gpus: 0`` and asks for CPUs (its
``host`` amounts are the job's total); it gets no GPUs (``CUDA_VISIBLE_DEVICES`` is empty) and is
placed away from NVLink domains (:mod:`tessera.sched.core.cpu_stage`). Its progress is counted
in seconds of run (``expected_duration_s``), or in ``total_steps`` at ``cpu_steps_per_s``::

    gpus: 0
    host: {cpus: 16, memory: 64Gi}
    expected_duration_s: 3600

An **elastic** job (Pollux, Sia) gives ranges instead of numbers; the scheduler may then run it
on any GPU count and global batch inside them, resizing it by checkpoint-restart::

    gpus: {min: 1, max: 16}               # optional initial: (default min), what it starts on
    global_batch: {initial: 256, max: 4096}
    model: cifar10                        # a model with statistical-efficiency data

Either may stay a number (``gpus: 4`` with a batch range adapts only the batch). A GPU range
needs a ``global_batch``. The efficiency of a batch comes from the model's measured validation
curves (:mod:`tessera.perf.efficiency`); a batch range outside the measured one is refused, and
a job whose model has no such data runs *rigid* at its initial size, with a note in its events
-- never on a guessed efficiency (:func:`elastic_choice`).

Unknown fields are errors (``extra="forbid"``), so a typo such as ``gpu: 4`` fails loudly
instead of silently running on one GPU. Sizes are bounded (:class:`~tessera.live.limits.ApiLimits`,
configurable), numbers must be finite, and what would break a launch is refused here: a NUL
character in the command or a value, an ``env`` name that is not a shell variable name or that
the service sets itself (``TESSERA_*`` and the rendezvous variables) or that names the GPUs a
rank may use (``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``: the executor's choice), a
relative
``checkpoint_dir``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from tessera.errors import NoProfileError, SpecError, UnknownFlavorError
from tessera.live.executors.base import DEVICE_VARS
from tessera.live.limits import DEFAULT_LIMITS, ApiLimits, BodyError, parse_body
from tessera.model.gpus import resolve_flavor
from tessera.model.quantity import parse_cpus, parse_memory_gib
from tessera.model.resources import HostDemand
from tessera.plan.models import layered_model

#: Environment variables every rank gets from the service; a request may not set them.
RESERVED_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE"})
#: A shell variable name, matched with ``fullmatch``: ``re.match`` with ``$`` would accept a
#: name with a trailing newline (``"RANK\n"``), since ``$`` also matches before a final ``\n``.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


MAX_GPUS = 4096
MAX_GLOBAL_BATCH = 10_000_000


class GpuRange(BaseModel):
    """An elastic job's GPU count: anywhere from ``min`` to ``max``, starting at ``initial``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: int = Field(ge=1, le=MAX_GPUS)
    max: int = Field(ge=1, le=MAX_GPUS)
    initial: int | None = Field(None, ge=1, le=MAX_GPUS)

    @model_validator(mode="after")
    def _ordered(self) -> GpuRange:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.initial is not None and not self.min <= self.initial <= self.max:
            raise ValueError(f"initial {self.initial} is outside {self.min}-{self.max}")
        return self

    @property
    def start(self) -> int:
        """The count it asks for first (``initial``, else ``min``)."""
        return self.initial if self.initial is not None else self.min


class BatchRange(BaseModel):
    """An elastic job's global batch: it starts at ``initial`` and may grow up to ``max``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial: int = Field(gt=0, le=MAX_GLOBAL_BATCH)
    max: int = Field(gt=0, le=MAX_GLOBAL_BATCH)

    @model_validator(mode="after")
    def _ordered(self) -> BatchRange:
        if self.initial > self.max:
            raise ValueError(f"initial {self.initial} is above max {self.max}")
        return self


def _number_or_range(value: Any) -> str:
    """Which shape of a ``gpus``/``global_batch`` value was given (a mapping is a range)."""
    return _RANGE_TAG if isinstance(value, dict | BaseModel) else _NUMBER_TAG


_NUMBER_TAG, _RANGE_TAG = "<number>", "<range>"
"""Tags of the two shapes; :func:`describe_errors` leaves them out of a field's name."""
GpusField = Annotated[
    Annotated[Annotated[int, Field(ge=0, le=MAX_GPUS)], Tag(_NUMBER_TAG)]
    | Annotated[GpuRange, Tag(_RANGE_TAG)],
    Discriminator(_number_or_range)]
BatchField = Annotated[
    Annotated[Annotated[int, Field(gt=0, le=MAX_GLOBAL_BATCH)], Tag(_NUMBER_TAG)]
    | Annotated[BatchRange, Tag(_RANGE_TAG)],
    Discriminator(_number_or_range)]


class HostRequest(BaseModel):
    """CPU cores and host memory a job asks for, per GPU (``per: gpu``) or per job.

    Amounts are Kubernetes-like quantities (:mod:`tessera.model.quantity`); both default to 0
    when the other is given. Only *amounts* are accepted: a request cannot name CPU ids or
    NUMA nodes -- which cores a job is pinned to is the executor's choice, never the tenant's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float | str = 0
    memory: float | str = 0
    per: Literal["gpu", "job"] = "gpu"

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: float | str) -> float:
        try:
            return parse_cpus(v, "cpus")
        except SpecError as e:
            raise ValueError(str(e)) from None

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: float | str) -> float:
        try:
            return parse_memory_gib(v, "memory")
        except SpecError as e:
            raise ValueError(str(e)) from None

    def demand(self) -> HostDemand:
        """The core's :class:`~tessera.model.resources.HostDemand` (amounts in cores, GiB)."""
        return HostDemand(float(self.cpus), float(self.memory), self.per == "gpu")


class JobRequest(BaseModel):
    """A job as submitted (see the module docstring for an example)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    queue: str | None = Field(None, min_length=1, max_length=64)
    command: str | list[str]
    gpus: GpusField = 1
    global_batch: BatchField | None = None
    flavors: list[str] = Field(default_factory=list)
    priority: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False)
    priority_class: str | None = Field(None, min_length=1, max_length=253)
    max_retries: int = Field(0, ge=0, le=100)
    checkpoint_dir: str | None = None
    requires_locality: bool = False
    model: str | None = None
    job_type: str | None = None
    expected_duration_s: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False)
    total_steps: float | None = Field(None, gt=0, le=1e15, allow_inf_nan=False)
    max_runtime_s: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False)
    env: dict[str, str] = Field(default_factory=dict)
    parallelism: Literal["data", "3d"] = "data"
    exclusive: bool | None = Field(None, strict=True)
    memory_gib: float | None = Field(None, gt=0, le=1e5, allow_inf_nan=False)
    host: HostRequest | None = None
    power_limit_w: float | None = Field(None, gt=0, le=1e4, allow_inf_nan=False)
    cpu_steps_per_s: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False)

    @field_validator("command")
    @classmethod
    def _non_empty(cls, v: str | list[str]) -> str | list[str]:
        if (isinstance(v, str) and not v.strip()) or (isinstance(v, list) and not v):
            raise ValueError("command must not be empty")
        if any("\0" in a for a in ([v] if isinstance(v, str) else v)):
            raise ValueError("command must not contain NUL characters")
        return v

    @model_validator(mode="after")
    def _a_sample_per_rank(self) -> JobRequest:
        batch = self.initial_batch
        if batch is not None and batch < self.initial_gpus:
            raise ValueError(f"global_batch {batch} is smaller than gpus "
                             f"{self.initial_gpus}: every rank needs at least one sample per step")
        if isinstance(self.gpus, GpuRange):
            if batch is None:
                raise ValueError("a gpus range needs a global_batch (an elastic job's progress "
                                 "is measured in samples)")
            if self.max_batch is not None and self.max_batch < self.gpus.max:
                raise ValueError(f"global_batch max {self.max_batch} is smaller than gpus max "
                                 f"{self.gpus.max}: every rank needs at least one sample per step")
        if self.parallelism == "3d":
            self._check_3d()
        if self.gpus == 0 or self.cpu_steps_per_s is not None:
            self._check_cpu_only()
        return self

    def _check_cpu_only(self) -> None:
        """``gpus: 0`` (a CPU-only job) needs CPUs; its progress is counted in seconds of run
        unless it gives ``total_steps`` with ``cpu_steps_per_s`` (docs/jobs.md)."""
        if self.gpus != 0:
            raise ValueError("cpu_steps_per_s is for CPU-only jobs (gpus: 0); a GPU job's "
                             "speed comes from the throughput profiles")
        if self.host is None or float(self.host.cpus) <= 0:
            raise ValueError("gpus: 0 (a CPU-only job) needs host cpus > 0, e.g. "
                             "host: {cpus: 16, memory: 64Gi}")
        if self.total_steps is not None and self.cpu_steps_per_s is None:
            raise ValueError("a CPU-only job with total_steps needs cpu_steps_per_s (its steps "
                             "per second); or give expected_duration_s alone")
        gpu_only = [name for name, given in (
            ("flavors", bool(self.flavors)), ("global_batch", self.global_batch is not None),
            ("parallelism 3d", self.parallelism == "3d"),
            ("power_limit_w", self.power_limit_w is not None),
            ("memory_gib", self.memory_gib is not None),
            ("exclusive", self.exclusive is not None),  # (GPU sharing)
            ("requires_locality", self.requires_locality)) if given]  # (a gang on one node)
        if gpu_only:
            raise ValueError(f"a CPU-only job (gpus: 0) cannot set {', '.join(gpu_only)}")

    def _check_3d(self) -> None:
        """A 3-D plan needs a layer-wise model, a fixed global batch and a fixed GPU count."""
        if self.asks_elastic or self.global_batch is None:
            raise ValueError("parallelism 3d needs a fixed gpus count and a fixed global_batch "
                             "(the plan splits that batch into pipeline micro-batches)")
        if self.model is None:
            raise ValueError("parallelism 3d needs a layer-wise model, e.g. model: llama-7b")
        if self.expected_duration_s is not None and self.total_steps is None:
            raise ValueError("parallelism 3d takes total_steps (optimizer steps), not "
                             "expected_duration_s: its speed comes from its plan, so the "
                             "scheduler counts its progress in steps")
        try:
            layered_model(self.model)
        except NoProfileError as e:
            raise ValueError(f"parallelism 3d: {e}") from None

    @property
    def initial_gpus(self) -> int:
        """The GPU count the job asks for first (its only one unless ``gpus`` is a range)."""
        return self.gpus.start if isinstance(self.gpus, GpuRange) else self.gpus

    @property
    def initial_batch(self) -> int | None:
        """The global batch it starts at (``None``: no batch)."""
        b = self.global_batch
        return b.initial if isinstance(b, BatchRange) else b

    @property
    def max_batch(self) -> int | None:
        """The largest global batch it may run at."""
        b = self.global_batch
        return b.max if isinstance(b, BatchRange) else b

    @property
    def asks_elastic(self) -> bool:
        """Whether the request gives a GPU or batch range."""
        return isinstance(self.gpus, GpuRange) or isinstance(self.global_batch, BatchRange)

    @field_validator("checkpoint_dir")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or "\0" in v):
            raise ValueError("checkpoint_dir must be an absolute path (starting with /)")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if _ENV_NAME.fullmatch(key) is None:
                raise ValueError(f"{key[:64]!r} is not a variable name (letters, digits, _)")
            if key in RESERVED_ENV or key.startswith("TESSERA_"):
                raise ValueError(f"{key} is set by the service; it cannot be overridden")
            if key in DEVICE_VARS:
                raise ValueError(f"{key} is set by the executor to the GPUs the job was given; "
                                 "a job cannot choose its own")
            if "\0" in value:
                raise ValueError(f"the value of {key} contains a NUL character")
        return v

    @field_validator("flavors")
    @classmethod
    def _known_flavors(cls, v: list[str]) -> list[str]:
        try:
            return [resolve_flavor(f).short for f in v]
        except UnknownFlavorError as e:  # names the known flavors
            raise ValueError(str(e)) from None


def parse_request(text: str, fmt: str = "yaml",
                  limits: ApiLimits = DEFAULT_LIMITS) -> JobRequest:
    """Parse and validate a YAML or JSON job request.

    Raises:
        SpecError: malformed or too deeply nested text, or fields that fail validation or
            exceed ``limits`` (all of them listed).
    """
    try:
        raw: Any = parse_body(text, fmt, limits)
    except BodyError as e:
        raise SpecError(str(e).replace("request body", "job request", 1)) from None
    return validate_request(raw, limits)


def validate_request(raw: Any, limits: ApiLimits = DEFAULT_LIMITS) -> JobRequest:
    """Validate already-parsed data; every failing field is named in the error."""
    if not isinstance(raw, dict):
        raise SpecError(f"job request must be a mapping of fields, got {type(raw).__name__}")
    over = limits.violations(raw)
    if over:
        raise SpecError("invalid job request: " + "; ".join(over))
    try:
        return JobRequest.model_validate(raw)
    except ValidationError as e:
        raise SpecError("invalid job request: " + "; ".join(describe_errors(e))) from None


def describe_errors(e: ValidationError, most: int = 10) -> list[str]:
    """One readable line per validation error, e.g. ``gpu: unknown field``.

    At most ``most`` lines, and field names cut at 64 characters, so an answer to a hostile
    request (50,000 unknown fields, a megabyte-long key) stays short.
    """
    errors = e.errors(include_url=False, include_input=False)
    out = []
    for err in errors[:most]:
        loc = ".".join(_short(str(x)) for x in err["loc"]
                       if x not in (_NUMBER_TAG, _RANGE_TAG)) or "request"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        out.append(f"{loc}: {msg}")
    if len(errors) > most:
        out.append(f"and {len(errors) - most} more")
    return out


def _short(text: str, most: int = 64) -> str:
    return text if len(text) <= most else text[:most] + "…"
