"""Jobs: what a user asks for (``JobSpec``) and the lifecycle every job walks through.

A training job asks for a *gang* of ``num_gpus`` GPUs that start together, of one of the flavors
it accepts (in order of preference; empty means "any"). An *elastic* job also declares an
:class:`ElasticRange` (GPUs and global batch the scheduler may move it between); rigid policies
treat it as rigid at ``num_gpus``. Its work is a number of training steps;
how long that takes depends on where it runs, which only ``perf`` knows. Traces that give a
duration instead are converted by the reader: steps = duration × throughput on the trace's
reference flavor. A *CPU-only* job (``num_gpus`` 0: preprocessing, evaluation) asks for CPUs and
memory alone and gives its own speed (``cpu_steps_per_s``); GPU policies never see it.

The lifecycle is a table, not scattered ``if``\\ s::

    PENDING ─admit→ ADMITTED ─place→ RUNNING ─finish→ SUCCEEDED
       ▲                │                │  └─fail→ FAILED ─retry→ PENDING
       └──── preempt ───┴──── PREEMPTED ←┘
    any non-final state ─cancel→ CANCELLED
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import NewType

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor, resolve_flavors
from tessera.model.resources import HostDemand, ResourceSensitivity

JobId = NewType("JobId", str)


class JobState(enum.StrEnum):
    """Where a job is in its life."""

    PENDING = "pending"
    """Submitted, waiting for admission (quota) or placement (free GPUs)."""
    ADMITTED = "admitted"
    """Admitted by quota; GPUs chosen but workers not yet running."""
    RUNNING = "running"
    """Its gang holds GPUs and makes progress."""
    PREEMPTED = "preempted"
    """Stopped by the scheduler after a checkpoint; will be requeued."""
    SUCCEEDED = "succeeded"
    """Finished all its work (final)."""
    FAILED = "failed"
    """Crashed; requeued while its retry budget lasts, otherwise final."""
    CANCELLED = "cancelled"
    """Cancelled by its owner or rejected as impossible (final)."""


VALID_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # Admission by quota, or cancellation while waiting.
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.CANCELLED}),
    # Placement succeeded (RUNNING) or its reservation timed out (back to PENDING).
    JobState.ADMITTED: frozenset({JobState.RUNNING, JobState.PENDING, JobState.CANCELLED}),
    # Completion, crash, preemption, or cancellation of a running gang.
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.PREEMPTED, JobState.CANCELLED}
    ),
    # A preempted job is requeued with its checkpoint.
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    # A failed job retries while its budget lasts; otherwise FAILED is final.
    JobState.FAILED: frozenset({JobState.PENDING}),
    JobState.SUCCEEDED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

class InvalidTransition(SpecError):
    """A state change the lifecycle table does not allow."""


def transition(current: JobState, new: JobState) -> JobState:
    """Return ``new`` if the lifecycle allows ``current → new``, else raise InvalidTransition."""
    if new not in VALID_TRANSITIONS[current]:
        raise InvalidTransition(f"job cannot go from {current.value} to {new.value}")
    return new


@dataclass(frozen=True, slots=True)
class ElasticRange:
    """What an *elastic* (adaptive) job lets the scheduler change: its GPU count and its batch.

    A rigid job keeps ``JobSpec.num_gpus`` GPUs and its batch until it ends. An elastic job, as
    in Pollux and Sia, may run on anywhere from ``min_gpus`` to ``max_gpus`` GPUs and at any
    global batch from ``initial_batch_samples`` to ``max_batch_samples``; ``JobSpec.num_gpus`` is
    the count it asks for at first, which rigid policies give it. Its work is then measured as
    statistical progress: samples at the statistical efficiency of its model's reference batch
    ``M0`` (Pollux's initial batch, :mod:`tessera.perf.efficiency`), ``target_samples`` of them,
    so a job run at a larger batch processes more raw samples before it is done. The job's own
    initial batch may be above ``M0`` (Sia's cifar10 jobs start at 2,048-4,096, ``M0`` = 128).

    Attributes:
        min_gpus: fewest GPUs it can run on.
        max_gpus: most GPUs it can use.
        initial_batch_samples: global batch it starts at (and runs at under rigid policies).
        max_batch_samples: largest global batch it may be run at.
        efficiency_model: the profile whose validation curves give its efficiency (``cifar10``).
        target_samples: statistical progress it needs to finish, in samples at the efficiency
            of the model's reference batch ``M0``.
        slowdown: how much slower than its measured profile the job really trains (1 = as
            profiled; Sia's simulator calibrates cifar10 at 1.8 and its other models at 1.2).
            Only the simulator's true speed uses it; policies see the profile.
    """

    min_gpus: int
    max_gpus: int
    initial_batch_samples: int
    max_batch_samples: int
    efficiency_model: str
    target_samples: float
    slowdown: float = 1.0

    def __post_init__(self) -> None:
        if not self.slowdown > 0:
            raise SpecError(f"elastic range: slowdown must be > 0, got {self.slowdown}")
        if not 1 <= self.min_gpus <= self.max_gpus:
            raise SpecError(
                "elastic range: need 1 <= min_gpus <= max_gpus, got "
                f"{self.min_gpus}-{self.max_gpus}"
            )
        if not 1 <= self.initial_batch_samples <= self.max_batch_samples:
            raise SpecError(
                "elastic range: need 1 <= initial batch <= max batch, got "
                f"{self.initial_batch_samples}-{self.max_batch_samples}"
            )
        if not self.target_samples > 0:
            raise SpecError(f"elastic range: target_samples must be > 0, got {self.target_samples}")


@dataclass(frozen=True, slots=True)
class ThreeDParallel:
    """A job trained as a tensor × pipeline × data ("3-D") plan rather than data parallel.

    A data-parallel job (``JobSpec.parallelism`` ``None``) copies the whole model to every GPU
    and splits only the batch; its speed on a gang is predicted from per-flavor speeds. A 3-D
    job splits the *model* too -- layers into pipeline stages, weight matrices over
    tensor-parallel GPUs -- so its speed on a gang is whatever the planner's best plan for that
    gang achieves (:mod:`tessera.sched.core.plans`), and a gang no plan fits cannot run it. One
    training step is one optimizer step over ``global_batch_samples``.

    Attributes:
        model: a layer-wise planner model (``llama-7b``, ``gpt3-1.3b`` …,
            :func:`tessera.plan.models.layered_model`).
        global_batch_samples: samples per optimizer step over the whole gang.
    """

    model: str
    global_batch_samples: int

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise SpecError("3-D parallelism needs a layer-wise model name, e.g. llama-7b")
        if self.global_batch_samples < 1:
            raise SpecError(f"3-D parallelism: global batch must be >= 1 sample, got "
                            f"{self.global_batch_samples}")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A training job as submitted.

    Attributes:
        job_id: unique id within a workload.
        job_type: the model being trained, as ``perf`` knows it (``ResNet-50 (batch size 64)``).
        num_gpus: gang size: GPUs used at once.
        total_steps: training steps to run.
        submit_time_s: when it arrives, seconds from the start of the workload.
        flavors: acceptable GPU flavors, most preferred first; empty = any flavor. Names given
            here are resolved into catalog flavors once, at construction (an unknown name is
            an UnknownFlavorError naming the known ones).
        priority_weight: weight in fair policies (Gavel uses 1, and 5 for high priority).
        queue: tenant queue (Kueue LocalQueue/ClusterQueue name).
        max_retries: how many times a failed run is retried before the job is FAILED for good.
        requires_locality: the gang must sit on one node (no cross-node split allowed).
        slo_factor: Gavel's SLO factor (deadline = factor × isolated duration), ``None`` if none.
        duration_hint_s: the trace's duration on its reference flavor, when it gave one.
        elastic: the GPU and batch range of an elastic job; ``None`` for a rigid job.
        exclusive: the job must not share its GPUs with another job (co-location refused).
            Simulated traces default to ``False``; the live service sets it for its jobs
            unless their queue allows sharing.
        parallelism: how the job splits its work over its gang: ``None`` (the default) for
            data parallel, a :class:`ThreeDParallel` for a tensor × pipeline × data plan (a
            rigid job whose every rank needs at least one sample).
        memory_gib: the job's per-GPU memory estimate in GiB, ``None`` when it declares none;
            a packing policy lets two jobs share a GPU only when their estimates fit together
            (:mod:`tessera.sched.packing`).
        model: the model's name in the profile catalogs (the planner's cost models, Sia's
            profiles: ``imagenet``, ``bert``), when the trace names one; mixed-flavor
            policies read it to predict a gang's speed (:mod:`tessera.sched.mixed`).
        batch_size: the global batch (samples per step over the gang) the trace records,
            ``None`` when it records none.
        gpu_milli: the share of one GPU a fractional task asks for, in thousandths (1-999;
            ``None``: whole GPUs). Only 1-GPU jobs are fractional.
        priority: the job's priority under tenant quotas (the value of a Kueue
            WorkloadPriorityClass; larger = more important, 0 by default): which jobs a pending
            job may preempt to get its queue's quota back (:mod:`tessera.sched.core.quotas`).
            Unrelated to ``priority_weight``, which weighs a job's share in fair policies.
        host: the CPUs and host memory it asks for (:class:`~tessera.model.resources.HostDemand`,
            per GPU or per job); ``None``: the GPU-proportional share of its servers.
        sensitivity: its throughput as a function of CPUs and memory per GPU
            (:class:`~tessera.model.resources.ResourceSensitivity`, Synergy's profile);
            ``None``: insensitive (speed independent of CPUs and memory).
        max_delay_s: the job's slack: how much later than "as soon as possible" it may finish,
            so a carbon-aware policy may start it late or suspend it in dirty hours
            (:mod:`tessera.sim.carbon_shift`); ``None``: no slack declared.
        cpu_steps_per_s: a *CPU-only* job's speed, in its steps per second. A job with
            ``num_gpus`` 0 (preprocessing, evaluation, a data pipeline) must ask for CPUs
            (``host``) and give this rate: no GPU profile can say how fast it runs, so its
            ``total_steps`` advance at this rate wherever it lands, whatever the GPUs of its
            server. ``None`` on every job that uses GPUs (their speed comes from ``perf``).
            CPU-only jobs are placed by their own stage
            (:mod:`tessera.sched.core.cpu_stage`), never by a GPU policy.
        extra: trace columns kept verbatim (strings) for writers and reports, such as Gavel's
            launch command or FGD's QoS class. No decision reads them: anything a decision
            needs is a typed field above, parsed and checked where the job enters.
    """

    job_id: JobId
    job_type: str
    num_gpus: int
    total_steps: float
    submit_time_s: float
    flavors: tuple[GpuFlavor, ...] = ()
    priority_weight: float = 1.0
    queue: str = "default"
    max_retries: int = 0
    requires_locality: bool = False
    slo_factor: float | None = None
    duration_hint_s: float | None = None
    elastic: ElasticRange | None = None
    exclusive: bool = False
    parallelism: ThreeDParallel | None = None
    memory_gib: float | None = None
    model: str | None = None
    batch_size: int | None = None
    gpu_milli: int | None = None
    priority: int = 0
    host: HostDemand | None = None
    sensitivity: ResourceSensitivity | None = None
    max_delay_s: float | None = None
    cpu_steps_per_s: float | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if any(not isinstance(f, GpuFlavor) for f in self.flavors):
            object.__setattr__(self, "flavors", resolve_flavors(self.flavors))
        if self.num_gpus < 0 or (self.num_gpus == 0 and (
                self.host is None or self.host.cpus <= 0)):
            raise SpecError(f"job {self.job_id}: num_gpus must be >= 1, or 0 for a CPU-only job "
                            f"that asks for CPUs (host cpus > 0); got {self.num_gpus} GPUs and "
                            f"{'no CPUs' if self.host is None else f'{self.host.cpus:g} CPUs'}")
        if self.num_gpus == 0 or self.cpu_steps_per_s is not None:
            self._check_cpu_only()
        if not self.total_steps > 0:
            raise SpecError(f"job {self.job_id}: total_steps must be > 0, got {self.total_steps}")
        if self.submit_time_s < 0:
            raise SpecError(f"job {self.job_id}: negative submit time {self.submit_time_s}")
        if self.priority_weight <= 0:
            raise SpecError(f"job {self.job_id}: priority_weight must be > 0")
        if self.max_retries < 0:
            raise SpecError(f"job {self.job_id}: max_retries must be >= 0")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise SpecError(f"job {self.job_id}: priority must be a whole number, "
                            f"got {self.priority!r}")
        self._check_typed_fields()
        e = self.elastic
        p3 = self.parallelism
        if p3 is not None and (e is not None or p3.global_batch_samples < self.num_gpus):
            raise SpecError(
                f"job {self.job_id}: 3-D parallelism needs a rigid gang and a global batch of at "
                f"least its {self.num_gpus} GPUs (one sample per rank), got "
                f"{'an elastic range' if e is not None else p3.global_batch_samples}"
            )
        if e is not None and not e.min_gpus <= self.num_gpus <= e.max_gpus:
            raise SpecError(
                f"job {self.job_id}: asks for {self.num_gpus} GPUs, outside its elastic range "
                f"{e.min_gpus}-{e.max_gpus}"
            )

    @property
    def cpu_only(self) -> bool:
        """Whether the job uses no GPUs (its CPUs and memory are all it asks for)."""
        return self.num_gpus == 0

    def _check_cpu_only(self) -> None:
        """A CPU-only job: a speed of its own, no GPU-only fields; its demand is per job."""
        r = self.cpu_steps_per_s
        if self.num_gpus > 0:
            raise SpecError(f"job {self.job_id}: cpu_steps_per_s is for CPU-only jobs (0 GPUs); "
                            f"this one asks for {self.num_gpus} GPUs, whose speed comes from "
                            "the throughput profiles")
        if r is None or isinstance(r, bool) or not 0 < r < math.inf:
            raise SpecError(f"job {self.job_id}: a CPU-only job needs cpu_steps_per_s, its "
                            f"speed in steps per second (> 0), got {r!r}")
        gpu_only = [name for name, v in (
            ("flavors", self.flavors), ("elastic", self.elastic),
            ("parallelism", self.parallelism), ("gpu_milli", self.gpu_milli),
            ("sensitivity", self.sensitivity)) if v]
        if gpu_only:
            raise SpecError(f"job {self.job_id}: a CPU-only job (0 GPUs) cannot set "
                            f"{', '.join(gpu_only)}")
        host = self.host
        if host is not None and host.per_gpu:  # (no GPUs to be "per": the amounts are the job's)
            object.__setattr__(self, "host", HostDemand(host.cpus, host.mem_gib, per_gpu=False))

    def _check_typed_fields(self) -> None:
        """The optional typed attributes: a memory estimate, a batch, a GPU share."""
        m = self.memory_gib
        if m is not None and not 0 < m < math.inf:
            raise SpecError(f"job {self.job_id}: memory_gib must be a positive number of GiB, "
                            f"got {m!r}")
        if self.batch_size is not None and self.batch_size < 1:
            raise SpecError(f"job {self.job_id}: batch_size must be >= 1, got {self.batch_size}")
        d = self.max_delay_s
        if d is not None and not 0 <= d < math.inf:
            raise SpecError(f"job {self.job_id}: max_delay_s must be a number of seconds >= 0, "
                            f"got {d!r}")
        milli = self.gpu_milli
        if milli is not None and (not 1 <= milli <= 999 or self.num_gpus != 1):
            raise SpecError(f"job {self.job_id}: gpu_milli must be 1-999 on a 1-GPU job, got "
                            f"{milli} on {self.num_gpus} GPU(s)")


@dataclass(frozen=True, slots=True)
class Workload:
    """A validated list of jobs in submission order, with where it came from."""

    name: str
    jobs: tuple[JobSpec, ...]
    source: str = ""
    skipped_rows: int = 0
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.jobs:
            raise SpecError(f"workload {self.name!r} has no jobs")
        seen: set[str] = set()
        last = -1.0
        for j in self.jobs:
            if j.job_id in seen:
                raise SpecError(f"workload {self.name!r}: duplicate job id {j.job_id!r}")
            seen.add(j.job_id)
            if j.submit_time_s < last:
                raise SpecError(
                    f"workload {self.name!r}: job {j.job_id} submitted at {j.submit_time_s} s, "
                    f"before the previous job ({last} s); jobs must be in submission order"
                )
            last = j.submit_time_s

    def __len__(self) -> int:
        return len(self.jobs)
