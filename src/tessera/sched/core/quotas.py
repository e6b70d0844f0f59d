"""Tenancy as the decision core sees it: queues, their quotas per GPU flavor, and cohort trees.

These are Kueue's concepts (``kueue.x-k8s.io/v1beta2``) in Tessera's typed objects, so a
platform team reads the same words in both:

* A **queue** (Kueue's *ClusterQueue*, :class:`QueueQuota`) is a tenant's budget. Its quota is
  either one number of GPUs of *any* flavor (Tessera's original form: ``nominal_gpus``) or, per
  GPU flavor, a :class:`FlavorQuota` (Kueue's ``resourceGroups[].flavors[].resources[]`` for
  ``nvidia.com/gpu``). A per-flavor queue may run only on the flavors it lists; a flavor listed
  with ``nominal_gpus=0`` and a borrowing limit may run there only on borrowed quota.
* Each :class:`FlavorQuota` has a **nominal** quota (guaranteed), a **borrowing limit** (how much
  beyond nominal the queue may take from idle quota of its cohort; ``None`` = no limit) and a
  **lending limit** (how much of its *unused* nominal quota others may borrow; ``None`` = all of
  it). The rest of the nominal quota stays the queue's own even when it is idle.
* A **cohort** (:class:`Cohort`, Kueue's ``Cohort`` with ``parentName``) groups queues and other
  cohorts into a tree. Quota flows up the tree as lendable capacity and down as borrowing; a
  cohort may hold quota of its own and limits of its own toward its parent. Queues with no
  cohort borrow and lend nothing.
* **Fair sharing** (:class:`FairSharing`): among queues that borrow, the one with the lowest
  weighted share of what it borrows goes first, and may reclaim from those above their fair
  share (Kueue's ``fairSharing.weight`` and its two preemption strategies); with a usage
  half-life, admission is ordered by decayed usage history instead of current usage. A weight of
  0 means "only borrows idle capacity" (it never wins a share contest).
* **Preemption** per queue (:class:`QueuePreemption`, Kueue's ``spec.preemption``): whether a
  pending job may preempt lower-priority jobs of its own queue, and whether it may reclaim its
  lent quota from borrowing queues of its cohort.
* **Flavor fungibility** (:class:`FlavorFungibility`): when the first flavor does not fit
  within nominal quota, try the next flavor before borrowing, or before preempting.

This module holds the values and their checks (the whole tree is checked by
:meth:`tessera.sched.core.tenancy.Tenancy.check`), nothing
else: the enforcement lives with the decision core, the readers (Tessera YAML, Kueue YAML) at
the edges. Every check names the object and the field, so a service never starts half
configured.

Keys of per-flavor maps are catalog :class:`~tessera.model.gpus.GpuFlavor` objects: names are
resolved by the readers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor


def _check_count(owner: str, name: str, value: int | None, *, optional: bool) -> None:
    if value is None:
        if not optional:
            raise SpecError(f"{owner}: {name} is required")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{owner}: {name} must be a whole number of GPUs, got {value!r}")
    if value < 0:
        raise SpecError(f"{owner}: {name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One quota line: how many GPUs are guaranteed, borrowable and lendable.

    Attributes:
        nominal_gpus: GPUs guaranteed to the owner (queue or cohort).
        borrowing_limit_gpus: GPUs the owner may use beyond ``nominal_gpus`` by borrowing
            through its cohort; ``None`` = unlimited, 0 = no borrowing.
        lending_limit_gpus: of the owner's *unused* nominal GPUs, how many others may borrow;
            ``None`` = all of them, 0 = none (the quota is reserved even when idle).
    """

    nominal_gpus: int
    borrowing_limit_gpus: int | None = None
    lending_limit_gpus: int | None = None

    def check(self, owner: str) -> None:
        """Refuse negative or fractional GPU counts and a lending limit above nominal."""
        _check_count(owner, "nominal_gpus", self.nominal_gpus, optional=False)
        _check_count(owner, "borrowing_limit_gpus", self.borrowing_limit_gpus, optional=True)
        _check_count(owner, "lending_limit_gpus", self.lending_limit_gpus, optional=True)
        if self.lending_limit_gpus is not None and self.lending_limit_gpus > self.nominal_gpus:
            raise SpecError(f"{owner}: lending_limit_gpus ({self.lending_limit_gpus}) exceeds "
                            f"nominal_gpus ({self.nominal_gpus})")


class ReclaimWithinCohort(Enum):
    """Whether a pending job may preempt other queues' jobs that run on borrowed quota, to take
    back its queue's nominal quota (Kueue's ``preemption.reclaimWithinCohort``)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class WithinQueue(Enum):
    """Whether a pending job may preempt jobs of its own queue to fit within nominal quota
    (Kueue's ``preemption.withinClusterQueue``)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


@dataclass(frozen=True, slots=True)
class QueuePreemption:
    """A queue's preemption rules (Kueue's ``ClusterQueue.spec.preemption``; Kueue's defaults).

    Attributes:
        reclaim_within_cohort: may reclaim lent quota from borrowing queues of the cohort.
        within_queue: may preempt lower-priority jobs of its own queue.
    """

    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    within_queue: WithinQueue = WithinQueue.NEVER


class WhenCanBorrow(Enum):
    """Kueue's ``flavorFungibility.whenCanBorrow``: take this flavor by borrowing, or first try
    the next flavor within nominal quota."""

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class WhenCanPreempt(Enum):
    """Kueue's ``flavorFungibility.whenCanPreempt``: preempt to get this flavor, or first try
    the next flavor (where the job would fit without preempting)."""

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """How a pending job moves between the flavors its queue lists (Kueue's defaults:
    ``whenCanBorrow: MayStopSearch``, ``whenCanPreempt: TryNextFlavor``)."""

    when_can_borrow: WhenCanBorrow = WhenCanBorrow.MAY_STOP_SEARCH
    when_can_preempt: WhenCanPreempt = WhenCanPreempt.TRY_NEXT_FLAVOR


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """A tenant queue's quota (Kueue's ClusterQueue).

    The one-number form (``QueueQuota(name, nominal_gpus, borrowing_limit_gpus)``) counts GPUs
    of any flavor, as Tessera always has. The per-flavor form is built with
    :meth:`per_flavor`: ``flavors`` then lists the flavors the queue may use, and
    ``nominal_gpus`` / ``borrowing_limit_gpus`` are their totals (what tables show).

    Attributes:
        name: queue name.
        nominal_gpus: GPUs the queue is guaranteed (any flavor; with ``flavors``, their sum).
        borrowing_limit_gpus: extra GPUs it may borrow from idle quota of its cohort;
            ``None`` = unlimited, 0 = no borrowing (with ``flavors``: the sum, ``None`` if any
            flavor's is unlimited).
        weight: fair-sharing weight (Kueue's ``fairSharing.weight``); 0 = only borrows idle
            capacity.
        cohort: the cohort the queue belongs to (``None``: borrows and lends nothing).
        lending_limit_gpus: of the any-flavor quota, how much others may borrow (``None``: all).
        flavors: per-flavor quotas, in the queue's flavor order (the order a pending job tries
            them); empty for the any-flavor form.
        preemption: the queue's preemption rules.
        fungibility: how a job moves between the listed flavors.
        min_admitted_s: time sharing inside the queue: a running job is not preempted by an
            equal-priority job of its own queue before it has run this long (``None``: off).
        nominal_cpus / nominal_mem_gib: CPUs and GiB of host memory the queue's CPU-only jobs
            may hold together (Kueue's ``cpu`` / ``memory`` quota; ``None``: no limit).
            Charged by CPU-only jobs' asks only (a GPU job's CPUs come with its GPUs): the CPU
            stage starts none that would take the queue over (:mod:`.host_quota`).
    """

    name: str
    nominal_gpus: int
    borrowing_limit_gpus: int | None = None
    weight: float = 1.0
    cohort: str | None = None
    lending_limit_gpus: int | None = None
    flavors: Mapping[GpuFlavor, FlavorQuota] = field(default_factory=dict)
    preemption: QueuePreemption = QueuePreemption()
    fungibility: FlavorFungibility = FlavorFungibility()
    min_admitted_s: float | None = None
    nominal_cpus: float | None = None
    nominal_mem_gib: float | None = None

    @classmethod
    def per_flavor(cls, name: str, flavors: Mapping[GpuFlavor, FlavorQuota], *,
                   weight: float = 1.0, cohort: str | None = None,
                   preemption: QueuePreemption = QueuePreemption(),
                   fungibility: FlavorFungibility = FlavorFungibility(),
                   min_admitted_s: float | None = None) -> QueueQuota:
        """A queue whose quota is given per flavor; the totals are derived."""
        limits = [q.borrowing_limit_gpus for q in flavors.values()]
        borrow = None if any(b is None for b in limits) else sum(b for b in limits if b)
        lends = [q.lending_limit_gpus for q in flavors.values()]
        lend = None if any(x is None for x in lends) else sum(x for x in lends if x)
        return cls(name, sum(q.nominal_gpus for q in flavors.values()), borrow, weight,
                   cohort, lend, dict(flavors), preemption, fungibility, min_admitted_s)

    @property
    def by_flavor(self) -> bool:
        """True when the quota is given per flavor (Kueue's form)."""
        return bool(self.flavors)

    @property
    def any_flavor(self) -> FlavorQuota:
        """The any-flavor quota line (meaningful when not :attr:`by_flavor`)."""
        return FlavorQuota(self.nominal_gpus, self.borrowing_limit_gpus, self.lending_limit_gpus)

    def check(self) -> None:
        """Refuse bad numbers, naming the queue and the field."""
        owner = f"queue {self.name!r}"
        if not self.name:
            raise SpecError("queue: name must not be empty")
        if self.by_flavor:
            for flavor, q in self.flavors.items():
                q.check(f"{owner} flavor {flavor.name!r}")
        else:
            self.any_flavor.check(owner)
        _check_weight(owner, self.weight)
        if self.min_admitted_s is not None and not (
                math.isfinite(self.min_admitted_s) and self.min_admitted_s > 0):
            raise SpecError(f"{owner}: min_admitted_s must be a positive number of seconds, "
                            f"got {self.min_admitted_s!r}")
        for what, v in (("cpus", self.nominal_cpus), ("memory", self.nominal_mem_gib)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not (math.isfinite(v) and v >= 0)):
                raise SpecError(f"{owner}: {what} must be a number >= 0, got {v!r}")


def _check_weight(owner: str, weight: float) -> None:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (
            math.isfinite(weight) and weight >= 0):
        raise SpecError(f"{owner}: weight must be a number >= 0, got {weight!r}")


@dataclass(frozen=True, slots=True)
class Cohort:
    """A node of the cohort tree (Kueue's ``Cohort``).

    Attributes:
        name: cohort name.
        parent: the parent cohort (``None``: a root).
        flavors: quota the cohort holds itself, per flavor (Kueue lets a cohort own
            ``resourceGroups``); its borrowing and lending limits bound what the whole subtree
            takes from, and gives to, the parent.
        any_flavor: the same for a tree that counts GPUs of any flavor (``None``: no own quota
            and no limits toward the parent).
        weight: the subtree's fair-sharing weight among its siblings.
    """

    name: str
    parent: str | None = None
    flavors: Mapping[GpuFlavor, FlavorQuota] = field(default_factory=dict)
    any_flavor: FlavorQuota | None = None
    weight: float = 1.0

    def check(self) -> None:
        owner = f"cohort {self.name!r}"
        if not self.name:
            raise SpecError("cohort: name must not be empty")
        for flavor, q in self.flavors.items():
            q.check(f"{owner} flavor {flavor.name!r}")
        if self.any_flavor is not None:
            self.any_flavor.check(owner)
        if self.flavors and self.any_flavor is not None:
            raise SpecError(f"{owner}: give its quota per flavor or as any-flavor GPUs, not both")
        _check_weight(owner, self.weight)
