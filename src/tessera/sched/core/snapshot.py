"""What the decision core sees: an immutable snapshot of the cluster and the active jobs.

The simulator and the live service each build a :class:`Snapshot` from their own state (virtual
or wall clock) and hand it to :func:`tessera.sched.core.decide.decide`. Nothing in here changes; a
decision is a new value, never a mutation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tessera.model.cluster import ClusterSpec, Node
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.sched.core.quotas import QueueQuota
from tessera.sched.core.tenancy import Tenancy

if TYPE_CHECKING:  # (a type only: the fit's SciPy stays out of the core's imports)
    from tessera.perf.goodput_fit import StepFits

MIX_SEPARATOR = "+"
"""Joins the flavors of a mixed gang's label: ``A100-40GB+V100-16GB``."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a gang runs: GPUs taken on each node, and their flavors.

    A gang is normally *homogeneous*: every GPU of one flavor (build it with :meth:`of`). A
    *mixed* gang (Sia/Cannikin style) holds GPUs of several flavors and trains data-parallel
    with a planned, uneven split of its batch (:mod:`tessera.sched.mixed.rates` predicts its
    speed); build it with :meth:`mixed`. Servers hold one flavor each, so a mixed gang always
    spans several nodes.

    Flavors are catalog :class:`~tessera.model.gpus.GpuFlavor` objects, never names: a name is
    resolved where it enters Tessera. :attr:`label` is the one string form (for tables, the
    store and grouping by display name).

    Attributes:
        flavors: the gang's flavors, sorted by short name; one entry for a homogeneous gang.
        gpus_by_node: ``((node_id, gpu_count), ...)``, most GPUs first.
        node_flavors: for a mixed gang, the flavor of each ``gpus_by_node`` entry; empty for
            a homogeneous gang.
        colocated_with: the other jobs space-sharing these same GPUs (co-location, see
            :mod:`tessera.sched.packing.pairs`); empty when the gang has its GPUs to itself.
        global_batch_samples: the global batch an elastic job runs at in this placement;
            ``None`` = the job's own batch (every rigid job). An elastic job's gang may hold
            any GPU count within its :class:`~tessera.model.jobs.ElasticRange`.
        host_by_node: ``((node_id, cpus, mem_gib), ...)``: the CPU cores and host memory the
            gang holds on each of its nodes, when a resource-aware policy (Synergy's
            allocations) chose them. Empty: the job's own
            :class:`~tessera.model.resources.HostDemand`, or the GPU-proportional share of each
            node when it declares none.
    """

    flavors: tuple[GpuFlavor, ...]
    gpus_by_node: tuple[tuple[str, int], ...]
    node_flavors: tuple[GpuFlavor, ...] = ()
    global_batch_samples: int | None = None
    colocated_with: tuple[JobId, ...] = field(default=(), repr=False)
    host_by_node: tuple[tuple[str, float, float], ...] = field(default=(), repr=False)
    # Derived once at construction (the simulator asks for them on every advance of a running
    # job); not compared, hashed or shown, so equality stays that of the fields above.
    num_gpus: int = field(init=False, compare=False, repr=False)
    """GPUs in the gang."""
    consolidated: bool = field(init=False, compare=False, repr=False)
    """True when the whole gang sits on one node."""
    is_mixed: bool = field(init=False, compare=False, repr=False)
    """True when the gang holds GPUs of more than one flavor."""
    label: str = field(init=False, compare=False, repr=False)
    """The flavors' short names joined by ``+`` (``A100-40GB+V100-16GB``); a homogeneous
    gang's is its flavor's short name. For display and the store, never looked up."""
    _flavor_counts: tuple[tuple[GpuFlavor, int], ...] = field(init=False, compare=False,
                                                              repr=False)
    _sole: GpuFlavor | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = 0
        for _n, c in self.gpus_by_node:
            n += c
        set_ = object.__setattr__
        set_(self, "num_gpus", n)
        set_(self, "consolidated", len(self.gpus_by_node) == 1)
        set_(self, "is_mixed", bool(self.node_flavors))
        if not self.node_flavors:
            if len(self.flavors) != 1:
                raise ValueError(f"a homogeneous gang has one flavor, not {self.flavors}; "
                                 "build a mixed gang with Placement.mixed")
            counts: tuple[tuple[GpuFlavor, int], ...] = ((self.flavors[0], n),)
            set_(self, "_sole", self.flavors[0])
        else:
            by: dict[GpuFlavor, int] = {}
            for (_n, c), f in zip(self.gpus_by_node, self.node_flavors, strict=True):
                by[f] = by.get(f, 0) + c
            counts = tuple(sorted(by.items(), key=lambda fc: fc[0].short))
            set_(self, "_sole", None)
        set_(self, "_flavor_counts", counts)
        set_(self, "label", MIX_SEPARATOR.join(f.short for f in self.flavors))

    @classmethod
    def of(cls, flavor: GpuFlavor, gpus_by_node: tuple[tuple[str, int], ...], *,
           global_batch_samples: int | None = None,
           colocated_with: tuple[JobId, ...] = ()) -> Placement:
        """A homogeneous gang: every GPU of ``flavor``."""
        return cls((flavor,), gpus_by_node, (), global_batch_samples, colocated_with)

    @classmethod
    def mixed(cls, parts: tuple[tuple[str, GpuFlavor, int], ...]) -> Placement:
        """A gang from ``((node_id, flavor, gpus), ...)``; homogeneous if one flavor is used."""
        flavors = tuple(sorted({f for _n, f, _c in parts}, key=lambda f: f.short))
        by_node = tuple((n, c) for n, _f, c in parts)
        if len(flavors) == 1:
            return cls(flavors, by_node)
        return cls(flavors, by_node, tuple(f for _n, f, _c in parts))

    @property
    def flavor(self) -> GpuFlavor:
        """The flavor of every GPU of a homogeneous gang.

        Raises:
            ValueError: for a mixed gang, which has no one flavor (read :attr:`flavors`,
                :meth:`flavor_counts` or :meth:`parts`).
        """
        sole = self._sole
        if sole is None:
            raise ValueError(f"a mixed gang ({self.label}) has no one flavor; read .flavors")
        return sole

    @property
    def sole_flavor(self) -> GpuFlavor | None:
        """The flavor of a homogeneous gang, ``None`` for a mixed one (to compare with)."""
        return self._sole

    def flavor_counts(self) -> tuple[tuple[GpuFlavor, int], ...]:
        """``((flavor, gpus), ...)`` sorted by short name; one entry for a homogeneous gang."""
        return self._flavor_counts

    def parts(self) -> tuple[tuple[str, int, GpuFlavor], ...]:
        """``((node_id, gpus, flavor), ...)`` in placement order, for homogeneous gangs too."""
        if not self.node_flavors:
            f = self.flavors[0]
            return tuple((n, c, f) for n, c in self.gpus_by_node)
        return tuple((n, c, f) for (n, c), f in
                     zip(self.gpus_by_node, self.node_flavors, strict=True))

    def gpus_of(self, flavor: GpuFlavor) -> int:
        """GPUs of ``flavor`` in the gang."""
        if not self.node_flavors:
            return self.num_gpus if flavor == self.flavors[0] else 0
        return sum(c for (_n, c), f in zip(self.gpus_by_node, self.node_flavors, strict=True)
                   if f == flavor)

    def same_gpus(self, other: Placement) -> bool:
        """Whether ``other`` holds the same GPUs (flavor, GPUs per node, each node's flavor),
        whoever shares them and at whatever batch: the test co-location is built on."""
        return (self.flavors == other.flavors and self.gpus_by_node == other.gpus_by_node
                and self.node_flavors == other.node_flavors)

    def describe(self) -> str:
        if self.node_flavors:
            nodes = "+".join(f"{n}:{c}×{f}" for (n, c), f in
                             zip(self.gpus_by_node, self.node_flavors, strict=True))
            mix = ", ".join(f"{c}×{f}" for f, c in self.flavor_counts())
            return f"{self.num_gpus} GPUs mixed ({mix}) on {nodes}"
        nodes = "+".join(f"{n}:{c}" for n, c in self.gpus_by_node)
        shared = (" shared with " + ", ".join(str(j) for j in self.colocated_with)
                  if self.colocated_with else "")
        return f"{self.num_gpus}×{self.label} on {nodes}{shared}"


@dataclass(frozen=True, slots=True)
class JobView:
    """One active (not finished) job as the core sees it.

    Attributes:
        spec: what was submitted.
        state: lifecycle state (PENDING, RUNNING ...).
        remaining_steps: work left.
        placement: where it runs now, ``None`` unless RUNNING.
        attained_gpu_s: GPU-seconds of service received so far (Tiresias' 2D attained service).
        run_s_by_flavor: wall seconds run so far on each flavor (Gavel's "time received").
        pending_since_s: when it last started waiting (submission, preemption or failure).
        last_run_end_s: when it last stopped running, ``None`` if it never ran.
        attempts: failed runs so far.
        as_of_s: the time ``remaining_steps``, ``attained_gpu_s`` and ``run_s_by_flavor``
            were measured. A driver may hand over a view of a running job measured earlier;
            :meth:`remaining_at` and :meth:`attained_at` extrapolate it to any instant, so a
            running job's view need not be rebuilt at every event.
        progress_rate: steps/s while running (0 if unknown or not running).
        progress_from_s: when the current run started making progress (after its restore).
        noise_scale_samples: the gradient noise scale the job last reported (samples, at its
            initial batch; Pollux's agent), ``None`` if it reports none: Sia and Pollux then
            fit its statistical efficiency from it instead of reading the bundled table.
        step_fits: the job's throughput model fitted to the step times it reported, per
            flavor it ran on (Pollux's agent; :func:`tessera.perf.goodput_fit.fit_throughput`):
            Sia and Pollux price its iterations there with it instead of the measured profile.
    """

    spec: JobSpec
    state: JobState
    remaining_steps: float
    placement: Placement | None = None
    attained_gpu_s: float = 0.0
    run_s_by_flavor: tuple[tuple[GpuFlavor, float], ...] = ()
    pending_since_s: float = 0.0
    last_run_end_s: float | None = None
    attempts: int = 0
    as_of_s: float = 0.0
    progress_rate: float = 0.0
    progress_from_s: float = 0.0
    noise_scale_samples: float | None = None
    step_fits: StepFits = ()

    def remaining_at(self, now_s: float) -> float:
        """Steps left at ``now_s`` (extrapolated while running)."""
        if self.state is JobState.RUNNING and self.progress_rate > 0:
            start = max(self.as_of_s, self.progress_from_s)
            if now_s > start:
                return max(self.remaining_steps - self.progress_rate * (now_s - start), 0.0)
        return self.remaining_steps

    def attained_at(self, now_s: float) -> float:
        """GPU-seconds of service received by ``now_s`` (extrapolated while running)."""
        if self.state is JobState.RUNNING and now_s > self.as_of_s:
            return self.attained_gpu_s + self.spec.num_gpus * (now_s - self.as_of_s)
        return self.attained_gpu_s

    @property
    def job_id(self) -> JobId:
        return self.spec.job_id

    @property
    def running(self) -> bool:
        return self.state is JobState.RUNNING

    def run_s_on(self, flavor: GpuFlavor) -> float:
        for f, s in self.run_s_by_flavor:
            if f == flavor:
                return s
        return 0.0


@dataclass(frozen=True, slots=True, eq=False)
class JobSplit:
    """A snapshot's jobs split into the running and the rest, each in snapshot order.

    An event round looks at the waiting jobs first and at the running gangs only to move
    them (:func:`~tessera.sched.core.decide.decide`), so it splits the jobs once; a driver that
    keeps the split between rounds may hand it over with the snapshot (``Snapshot.split_hint``).
    A driver that keeps only the waiting jobs may leave the running ones to be picked out of
    ``jobs`` when first asked for (``running=None``): an event round that places a newcomer
    and moves nobody never asks.

    Attributes:
        jobs: the tuple this split describes (a split describes exactly one tuple).
        running: the jobs whose state is RUNNING.
        waiting: every other job (pending, admitted, preempted).
    """

    jobs: tuple[JobView, ...]
    _running: tuple[JobView, ...] | None
    waiting: tuple[JobView, ...]

    @classmethod
    def of(cls, jobs: tuple[JobView, ...]) -> JobSplit:
        """Split ``jobs`` by state."""
        running = JobState.RUNNING
        return cls(jobs, tuple([j for j in jobs if j.state is running]),
                   tuple([j for j in jobs if j.state is not running]))

    @property
    def running(self) -> tuple[JobView, ...]:
        """The jobs whose state is RUNNING, in snapshot order."""
        run = self._running
        if run is None:
            state = JobState.RUNNING
            run = tuple([j for j in self.jobs if j.state is state])
            object.__setattr__(self, "_running", run)
        return run

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobSplit):
            return NotImplemented
        return (self.jobs == other.jobs and self.waiting == other.waiting
                and self.running == other.running)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything ``decide`` may read.

    Attributes:
        now_s: the clock (virtual or wall), injected.
        cluster: the static inventory.
        jobs: active jobs (pending, running or preempted), in submission order.
        quotas: tenant quotas by queue name; queues not listed are unlimited.
        tenancy: the whole tenancy (queues with per-flavor quotas, the cohort tree, fair
            sharing), when the driver has one; its ``queues`` are then the quotas
            (:meth:`queue_quotas`) and ``quotas`` is not read. ``None``: ``quotas`` alone, with
            their one-number meaning.
        policy_state: opaque value the policy returned last round (its memory), or ``None``.
        round_s: round length when running round-based, else ``None``.
        down_nodes: nodes currently unavailable.
        free_gpus: free GPUs per node, when the driver keeps that count itself (the simulator
            does, so a round need not walk every running gang to find the free GPUs);
            ``None`` = derive it from the running jobs' placements.
        split_hint: ``jobs`` already split by state, when the driver has it; used only if it
            describes this very ``jobs`` tuple (see :meth:`split`), so a snapshot copied with
            other jobs never trusts a stale split.
    """

    now_s: float
    cluster: ClusterSpec
    jobs: tuple[JobView, ...]
    quotas: Mapping[str, QueueQuota] = field(default_factory=dict)
    policy_state: Any = None
    round_s: float | None = None
    down_nodes: frozenset[str] = frozenset()
    free_gpus: Mapping[str, int] | None = None
    split_hint: JobSplit | None = field(default=None, compare=False, repr=False)
    tenancy: Tenancy | None = None
    host_held: tuple[tuple[str, float, float], ...] = ()
    """``((node_id, cpus, mem_gib), ...)`` held by running jobs that are not in ``jobs``: the
    CPU-only jobs, which the GPU stages of a round do not see
    (:mod:`tessera.sched.core.cpu_stage`) but whose CPUs and memory they must not hand out."""
    host_draining: tuple[tuple[str, float, float], ...] = ()
    """``((queue, cpus, mem_gib), ...)`` held by CPU-only runs that are stopping (the live
    service's grace period; their jobs are not in ``jobs``): charged to their queues'
    ``cpus``/``memory`` quotas (:mod:`tessera.sched.core.host_quota`) until they exit."""
    gpu_draining: tuple[tuple[str, Placement], ...] = ()
    """``((queue, placement), ...)`` of GPU runs that are stopping and whose jobs are not in
    ``jobs`` (the live service's grace period; a cancelled or preempted job): their GPUs are
    charged to their queues' GPU quotas until they exit (:mod:`.quota_drain`)."""

    def queue_quotas(self) -> Mapping[str, QueueQuota]:
        """The quotas by queue: the tenancy's queues when there is one, else ``quotas``."""
        return self.quotas if self.tenancy is None else self.tenancy.queues

    def split(self) -> JobSplit:
        """The jobs split into running and waiting (the driver's split when it describes these
        jobs, else computed now)."""
        hint = self.split_hint
        if hint is not None and hint.jobs is self.jobs:
            return hint
        return JobSplit.of(self.jobs)

    def with_jobs(self, jobs: tuple[JobView, ...]) -> Snapshot:
        """This snapshot with other jobs: ``dataclasses.replace(self, jobs=jobs)``, built
        directly (an event round narrows its snapshot to the waiting jobs at every event, and
        ``replace`` walks the fields by name). The split hint goes along and, describing
        other jobs, is not used (see :meth:`split`)."""
        return Snapshot(self.now_s, self.cluster, jobs, self.quotas, self.policy_state,
                        self.round_s, self.down_nodes, self.free_gpus, self.split_hint,
                        self.tenancy, self.host_held, self.host_draining, self.gpu_draining)

    def up_nodes(self) -> tuple[Node, ...]:
        if not self.down_nodes:
            return self.cluster.nodes
        return tuple(n for n in self.cluster.nodes if n.node_id not in self.down_nodes)

    def up_flavors(self) -> tuple[GpuFlavor, ...]:
        """The up nodes' flavors, each once, in the order the nodes list them.

        With every node up this is the cluster's own list, computed once when the cluster was
        built; a round-based policy asks every round, and walking 552 nodes (Philly) for it
        was a sixth of ``max_min_fairness``'s time on the full table.
        """
        if not self.down_nodes:
            return self.cluster.flavors()
        return tuple(dict.fromkeys(n.flavor for n in self.up_nodes()))
