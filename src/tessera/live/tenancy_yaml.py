"""Tessera's tenancy YAML: queues with per-flavor quotas, cohort trees, fair sharing, priority
classes and local queues, read into the decision core's :class:`~tessera.sched.core.tenancy.
Tenancy`.

The same words as Kueue, in snake case. A queue gives its quota either as one number of GPUs
of any flavor (Tessera's original form, which keeps working unchanged) or per flavor::

    queues:
      - {name: legacy, nominal_gpus: 8, borrowing_limit_gpus: 4, weight: 1.0}
      - name: vision
        cohort: research                  # a cohort of the tree below
        flavors:                          # in preference order; catalog names or aliases
          A100-80GB: {nominal_gpus: 4, borrowing_limit_gpus: 2, lending_limit_gpus: 0}
          T4:
            nominal_gpus: 0
            mig: {}                       # MIG slices, see below
        preemption: {reclaim_within_cohort: LowerPriority, within_queue: LowerPriority}
        fungibility: {when_can_borrow: TryNextFlavor, when_can_preempt: TryNextFlavor}
        min_admitted_s: 600               # time sharing inside the queue
        weight: 2                         # fair-sharing weight; 0 = only borrows idle quota
        cpus: 64                          # CPU-only jobs' CPUs together (absent: no limit)
        memory: 256Gi                     # ... and their host memory (sched/core/host_quota)
    cohorts:
      - {name: org}
      - {name: research, parent: org, weight: 1,
         flavors: {A100-80GB: {nominal_gpus: 0, borrowing_limit_gpus: 8}}}
    fair_sharing:
      enabled: true
      strategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
      usage_half_life_s: 86400
    priority_classes:
      - {name: high, value: 1000}
    local_queues:
      - {name: vision-team, namespace: team-a, cluster_queue: vision}

A flavor's ``mig:`` lists quota in MIG slices per profile (Kueue's ``nvidia.com/mig-<p>``
resources; :mod:`tessera.sched.core.mig_quota`)::

    A100-80GB: {nominal_gpus: 0, mig: {1g.10gb: {nominal_slices: 7}, 7g.80gb: {nominal_slices: 1}}}

The file stands alone (``tessera simulate --tenancy``, ``tessera serve --tenancy``) or its
``queues:`` entries and top-level keys sit in the service's ``tessera-live.yaml`` beside the
tokens (:mod:`tessera.live.tenancy`). Every value is checked when the file is read, and the
error names the object and the field (``queue 'vision' flavor 'A100-80GB': nominal_gpus must be
>= 0``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.quantity import parse_cpus, parse_memory_gib
from tessera.sched.core.mig_quota import MigQuota, MigQuotas
from tessera.sched.core.quotas import (
    Cohort,
    FlavorFungibility,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    ReclaimWithinCohort,
    WhenCanBorrow,
    WhenCanPreempt,
    WithinQueue,
)
from tessera.sched.core.tenancy import (
    FairPreemption,
    FairSharing,
    LocalQueue,
    PriorityClass,
    Tenancy,
)

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MigEntry(_Strict):
    """Quota in slices of one MIG profile."""

    nominal_slices: int = Field(ge=0)
    borrowing_limit_slices: int | None = Field(None, ge=0)
    lending_limit_slices: int | None = Field(None, ge=0)


class FlavorQuotaEntry(_Strict):
    """One flavor's quota line of a queue or cohort."""

    nominal_gpus: int = Field(ge=0)
    borrowing_limit_gpus: int | None = Field(None, ge=0)
    lending_limit_gpus: int | None = Field(None, ge=0)
    mig: dict[str, MigEntry] = Field(default_factory=dict)


class PreemptionEntry(_Strict):
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    within_queue: WithinQueue = WithinQueue.NEVER


class FungibilityEntry(_Strict):
    when_can_borrow: WhenCanBorrow = WhenCanBorrow.MAY_STOP_SEARCH
    when_can_preempt: WhenCanPreempt = WhenCanPreempt.TRY_NEXT_FLAVOR


class QueueQuotaEntry(_Strict):
    """A queue's quota fields (the service's config adds run settings to these)."""

    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    nominal_gpus: int | None = Field(None, ge=0)
    borrowing_limit_gpus: int | None = Field(None, ge=0)
    lending_limit_gpus: int | None = Field(None, ge=0)
    weight: float = Field(1.0, ge=0, allow_inf_nan=False)
    cohort: str | None = Field(None, min_length=1)
    flavors: dict[str, FlavorQuotaEntry] | None = None
    preemption: PreemptionEntry = PreemptionEntry()
    fungibility: FungibilityEntry = FungibilityEntry()
    min_admitted_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    cpus: float | str | None = None
    """CPUs the queue's CPU-only jobs may hold together (``16``, ``"1500m"``; absent: any)."""
    memory: float | str | None = None
    """Their host memory (``"64Gi"``, ``"512Mi"`` or a bare number of GiB; absent: any)."""

    @field_validator("cpus", "memory", mode="before")  # (before: `cpus: true` is not 1 CPU)
    @classmethod
    def _host_amount(cls, v: float | str | None, info: ValidationInfo) -> float | None:
        if v is None:
            return None
        try:
            return (parse_cpus(v, "cpus") if info.field_name == "cpus"
                    else parse_memory_gib(v, "memory"))
        except SpecError as e:
            raise ValueError(str(e)) from None

    @model_validator(mode="after")
    def _one_form(self) -> QueueQuotaEntry:
        if self.flavors is None and self.nominal_gpus is None:
            raise ValueError("give nominal_gpus (GPUs of any flavor) or flavors (per flavor)")
        if self.flavors is not None and (self.nominal_gpus is not None
                                         or self.borrowing_limit_gpus is not None
                                         or self.lending_limit_gpus is not None):
            raise ValueError("give nominal_gpus/borrowing_limit_gpus/lending_limit_gpus "
                             "(any flavor) or flavors (per flavor), not both")
        if self.flavors is not None and not self.flavors:
            raise ValueError("flavors must list at least one flavor")
        return self


class CohortEntry(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN)
    parent: str | None = Field(None, min_length=1)
    flavors: dict[str, FlavorQuotaEntry] = Field(default_factory=dict)
    nominal_gpus: int | None = Field(None, ge=0)
    borrowing_limit_gpus: int | None = Field(None, ge=0)
    lending_limit_gpus: int | None = Field(None, ge=0)
    weight: float = Field(1.0, ge=0, allow_inf_nan=False)


class FairSharingEntry(_Strict):
    enabled: bool = False
    strategies: list[FairPreemption] = Field(default_factory=lambda: list(
        FairSharing().strategies))
    usage_half_life_s: float | None = Field(None, gt=0, allow_inf_nan=False)


class PriorityClassEntry(_Strict):
    name: str = Field(min_length=1, max_length=253)
    value: int = Field(ge=-(2**31), le=2**31 - 1)


class LocalQueueEntry(_Strict):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    namespace: str = Field("default", min_length=1, max_length=63, pattern=NAME_PATTERN)
    cluster_queue: str = Field(min_length=1)


class TenancyFields(_Strict):
    """The top-level keys of a tenancy besides ``queues:``."""

    cohorts: list[CohortEntry] = Field(default_factory=list)
    fair_sharing: FairSharingEntry = FairSharingEntry()
    priority_classes: list[PriorityClassEntry] = Field(default_factory=list)
    local_queues: list[LocalQueueEntry] = Field(default_factory=list)


class TenancyFile(TenancyFields):
    """A standalone tenancy file (``--tenancy PATH`` in Tessera's form)."""

    queues: list[QueueQuotaEntry] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class LoadedTenancy:
    """A tenancy as read: the tree the decision core enforces, plus each queue's MIG quota
    (:mod:`tessera.sched.core.mig_quota`; not yet enforced, see its docstring).

    Attributes:
        tree: queues, cohorts, fair sharing, priority classes, local queues (checked).
        mig: per queue, its MIG quota lines per flavor and profile (queues with none absent).
    """

    tree: Tenancy
    mig: dict[str, MigQuotas] = field(default_factory=dict)

    def check(self, cluster_flavors: Sequence[GpuFlavor] | None = None) -> None:
        """The tree's checks (:meth:`Tenancy.check`) and the MIG lines' (profiles the flavor
        has, whole non-negative slice counts)."""
        self.tree.check(cluster_flavors)
        present = None if cluster_flavors is None else set(cluster_flavors)
        for queue, by_flavor in self.mig.items():
            for flavor, lines in by_flavor.items():
                if present is not None and flavor not in present:
                    raise SpecError(f"queue {queue!r}: MIG quota for flavor "
                                    f"{flavor.name!r}, which the cluster does not have")
                for q in lines.values():
                    q.check(f"queue {queue!r}", flavor)


def _flavor(owner: str, name: str) -> GpuFlavor:
    try:
        return resolve_flavor(name)
    except Exception as e:  # UnknownFlavorError names the known flavors
        raise SpecError(f"{owner}: flavors: {e}") from None


def _flavor_quotas(owner: str, entries: dict[str, FlavorQuotaEntry]
                   ) -> tuple[dict[GpuFlavor, FlavorQuota], dict[GpuFlavor, dict[str, MigQuota]]]:
    quotas: dict[GpuFlavor, FlavorQuota] = {}
    mig: dict[GpuFlavor, dict[str, MigQuota]] = {}
    for name, e in entries.items():
        flavor = _flavor(owner, name)
        if flavor in quotas:
            raise SpecError(f"{owner}: flavors: {name!r} names {flavor.short} a second time")
        quotas[flavor] = FlavorQuota(e.nominal_gpus, e.borrowing_limit_gpus,
                                     e.lending_limit_gpus)
        if e.mig:
            mig[flavor] = {p: MigQuota(p, m.nominal_slices, m.borrowing_limit_slices,
                                       m.lending_limit_slices) for p, m in e.mig.items()}
    return quotas, mig


def queue_quota(q: QueueQuotaEntry) -> tuple[QueueQuota, dict[GpuFlavor, dict[str, MigQuota]]]:
    """The typed quota of one queue entry (and its MIG lines)."""
    preemption = QueuePreemption(q.preemption.reclaim_within_cohort, q.preemption.within_queue)
    fungibility = FlavorFungibility(q.fungibility.when_can_borrow, q.fungibility.when_can_preempt)
    cpus, mem = _amount(q.cpus), _amount(q.memory)
    if q.flavors is None:
        assert q.nominal_gpus is not None  # the entry's validator
        return replace(QueueQuota(q.name, q.nominal_gpus, q.borrowing_limit_gpus, q.weight,
                                  q.cohort, q.lending_limit_gpus, {}, preemption, fungibility,
                                  q.min_admitted_s), nominal_cpus=cpus,
                   nominal_mem_gib=mem), {}
    flavors, mig = _flavor_quotas(f"queue {q.name!r}", q.flavors)
    return replace(QueueQuota.per_flavor(q.name, flavors, weight=q.weight, cohort=q.cohort,
                                         preemption=preemption, fungibility=fungibility,
                                         min_admitted_s=q.min_admitted_s),
                   nominal_cpus=cpus, nominal_mem_gib=mem), mig


def _amount(v: float | str | None) -> float | None:
    """A validated ``cpus``/``memory`` field (its validator made it a float or ``None``)."""
    return None if v is None else float(v)


def build_tenancy(queues: Sequence[QueueQuotaEntry], top: TenancyFields) -> LoadedTenancy:
    """The checked tenancy of validated entries (flavors are checked against the cluster
    later, where it is known: :meth:`LoadedTenancy.check`).

    Raises:
        SpecError: naming the object and the field (a queue twice, a cohort that does not
            exist, a cycle, a local queue pointing nowhere ...).
    """
    quotas: dict[str, QueueQuota] = {}
    mig: dict[str, MigQuotas] = {}
    for entry in queues:
        if entry.name in quotas:
            raise SpecError(f"queue {entry.name!r} is listed twice")
        quotas[entry.name], lines = queue_quota(entry)
        if lines:
            mig[entry.name] = lines
    cohorts: dict[str, Cohort] = {}
    for c in top.cohorts:
        if c.name in cohorts:
            raise SpecError(f"cohort {c.name!r} is listed twice")
        owner = f"cohort {c.name!r}"
        flavors, cmig = _flavor_quotas(owner, c.flavors)
        if cmig:
            raise SpecError(f"{owner}: flavors: mig: MIG quota on a cohort is not supported "
                            "(give it to its queues)")
        gpus = (None if c.nominal_gpus is None and c.borrowing_limit_gpus is None
                and c.lending_limit_gpus is None
                else FlavorQuota(c.nominal_gpus or 0, c.borrowing_limit_gpus,
                                 c.lending_limit_gpus))
        cohorts[c.name] = Cohort(c.name, c.parent, flavors, gpus, c.weight)
    fs = top.fair_sharing
    classes: dict[str, PriorityClass] = {}
    for pc in top.priority_classes:
        if pc.name in classes:
            raise SpecError(f"priority class {pc.name!r} is listed twice")
        classes[pc.name] = PriorityClass(pc.name, pc.value)
    locals_: dict[str, LocalQueue] = {}
    for lq in top.local_queues:
        if lq.name in locals_:
            raise SpecError(f"local queue {lq.name!r} is listed twice (jobs name local queues "
                            "without their namespace)")
        if lq.name in quotas and lq.cluster_queue != lq.name:
            raise SpecError(f"local queue {lq.name!r}: the name is a queue's, so it may only "
                            f"point at that queue (not {lq.cluster_queue!r})")
        locals_[lq.name] = LocalQueue(lq.name, lq.namespace, lq.cluster_queue)
    tree = Tenancy(quotas, cohorts, FairSharing(fs.enabled, tuple(fs.strategies),
                                                fs.usage_half_life_s), classes, locals_)
    loaded = LoadedTenancy(tree, mig)
    loaded.check()
    return loaded


def describe_error(e: ValidationError, raw: object, where: str) -> str:
    """One line for the first problem pydantic found, naming the object by its name where the
    entry has one (``queue 'vision': flavors.A100.nominal_gpus: ...``) and the field."""
    err = e.errors()[0]
    loc = list(err["loc"])
    owner = where
    if (len(loc) >= 2 and isinstance(loc[1], int) and isinstance(raw, dict)
            and isinstance(raw.get(loc[0]), list)):
        kind = {"queues": "queue", "cohorts": "cohort", "priority_classes": "priority class",
                "local_queues": "local queue"}.get(str(loc[0]))
        item = raw[loc[0]][loc[1]]
        name = item.get("name") if isinstance(item, dict) else None
        if kind is not None and isinstance(name, str):
            owner = f"{where}: {kind} {name!r}"
            loc = loc[2:]
    field_path = ".".join(map(str, loc))
    return f"{owner}: {field_path}: {err['msg']}" if field_path else f"{owner}: {err['msg']}"


def tenancy_from_tessera(raw: object, where: str) -> LoadedTenancy:
    """A standalone tenancy file's content (:class:`TenancyFile`), checked.

    Raises:
        SpecError: naming the object and the field.
    """
    try:
        cfg = TenancyFile.model_validate(raw)
    except ValidationError as e:
        raise SpecError(describe_error(e, raw, where)) from None
    try:
        return build_tenancy(cfg.queues, cfg)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None
