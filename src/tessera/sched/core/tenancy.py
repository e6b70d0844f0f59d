"""The whole tenancy the decision core enforces: queues, the cohort tree, fair sharing,
priority classes and local queues, with the load-time checks that keep a service from starting
half configured (each names the object and the field).

The quota values themselves (:class:`~tessera.sched.core.quotas.QueueQuota`,
:class:`~tessera.sched.core.quotas.FlavorQuota`, :class:`~tessera.sched.core.quotas.Cohort`)
and what each Kueue word means are in :mod:`tessera.sched.core.quotas`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.sched.core.quotas import Cohort, FlavorQuota, QueueQuota


class FairPreemption(Enum):
    """Kueue's fair-sharing preemption strategies, tried in order: preempt a job of another
    queue if, after the preemption, the preempting queue's share stays at most the target's
    share (*LessThanOrEqualToFinalShare*), or if the target queue's share before it exceeds the
    preempting queue's (*LessThanInitialShare*)."""

    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Cluster-wide fair-sharing settings (Kueue's ``fairSharing`` and
    ``admissionFairSharing`` config).

    Attributes:
        enabled: borrowing and reclaim follow weighted shares (off: plain borrowing, first
            come first served among borrowers).
        strategies: the preemption strategies, in the order they are tried.
        usage_half_life_s: admission orders queues by usage history decayed with this
            half-life (Kueue's ``usageHalfLifeTime``); ``None`` = by current usage only.
    """

    enabled: bool = False
    strategies: tuple[FairPreemption, ...] = (
        FairPreemption.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, FairPreemption.LESS_THAN_INITIAL_SHARE)
    usage_half_life_s: float | None = None

    def check(self) -> None:
        if not self.strategies:
            raise SpecError("fair_sharing: strategies must name at least one strategy")
        if len(set(self.strategies)) != len(self.strategies):
            raise SpecError("fair_sharing: strategies lists a strategy twice")
        h = self.usage_half_life_s
        if h is not None and not (math.isfinite(h) and h > 0):
            raise SpecError(f"fair_sharing: usage_half_life_s must be > 0 seconds, got {h!r}")


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """A named priority (Kueue's WorkloadPriorityClass): larger ``value`` = more important."""

    name: str
    value: int


@dataclass(frozen=True, slots=True)
class LocalQueue:
    """A namespaced name for a queue (Kueue's LocalQueue): jobs may name it instead of the
    ClusterQueue it points at."""

    name: str
    namespace: str
    cluster_queue: str


@dataclass(frozen=True, slots=True)
class Tenancy:
    """The whole tenancy: queues, the cohort tree, fair sharing, priority classes and local
    queues. Build it in a reader, then call :meth:`check` once before using it.

    Attributes:
        queues: quotas by queue name.
        cohorts: cohorts by name.
        fair_sharing: fair-sharing settings.
        priority_classes: priority classes by name.
        local_queues: local queues by name (``namespace/name`` when namespaces differ is the
            reader's choice; jobs name them by the key used here).
    """

    queues: Mapping[str, QueueQuota] = field(default_factory=dict)
    cohorts: Mapping[str, Cohort] = field(default_factory=dict)
    fair_sharing: FairSharing = FairSharing()
    priority_classes: Mapping[str, PriorityClass] = field(default_factory=dict)
    local_queues: Mapping[str, LocalQueue] = field(default_factory=dict)

    def check(self, cluster_flavors: Iterable[GpuFlavor] | None = None) -> None:
        """Refuse, naming the object and the field: bad numbers, a queue or cohort in a cohort
        that does not exist, a cycle of cohorts, quota for a flavor the cluster lacks (when
        ``cluster_flavors`` is given), a local queue pointing nowhere, a tree that mixes
        any-flavor and per-flavor quotas."""
        present = None if cluster_flavors is None else set(cluster_flavors)
        for key, q in self.queues.items():
            if key != q.name:
                raise SpecError(f"queue {q.name!r} is filed under {key!r}")
            q.check()
            if q.cohort is not None and q.cohort not in self.cohorts:
                raise SpecError(f"queue {q.name!r}: cohort {q.cohort!r} does not exist")
            _check_flavors(f"queue {q.name!r}", q.flavors, present)
        for key, c in self.cohorts.items():
            if key != c.name:
                raise SpecError(f"cohort {c.name!r} is filed under {key!r}")
            c.check()
            if c.parent is not None and c.parent not in self.cohorts:
                raise SpecError(f"cohort {c.name!r}: parent {c.parent!r} does not exist")
            _check_flavors(f"cohort {c.name!r}", c.flavors, present)
        for name in self.cohorts:
            self.ancestors(name)  # raises on a cycle
        self.fair_sharing.check()
        for key, lq in self.local_queues.items():
            if lq.cluster_queue not in self.queues:
                raise SpecError(f"local queue {key!r}: cluster_queue {lq.cluster_queue!r} "
                                f"does not exist")
        self._check_one_mode()

    def _check_one_mode(self) -> None:
        """Within one cohort tree every quota counts the same way (per flavor or any flavor)."""
        seen: dict[str, tuple[str, bool]] = {}
        for q in self.queues.values():
            if q.cohort is None:
                continue
            root = self.root(q.cohort)
            prior = seen.setdefault(root, (f"queue {q.name!r}", q.by_flavor))
            if prior[1] != q.by_flavor:
                raise SpecError(f"queue {q.name!r} and {prior[0]} share cohort tree {root!r} "
                                f"but one counts GPUs per flavor and the other of any flavor")

    def ancestors(self, cohort: str) -> tuple[str, ...]:
        """``cohort`` and its ancestors up to the root, nearest first; a cycle is an error."""
        chain: list[str] = []
        name: str | None = cohort
        while name is not None:
            if name in chain:
                cycle = " -> ".join([*chain[chain.index(name):], name])
                raise SpecError(f"cohort {cohort!r}: cycle of cohorts {cycle}")
            chain.append(name)
            node = self.cohorts.get(name)
            if node is None:
                if len(chain) == 1:
                    raise SpecError(f"cohort {cohort!r} does not exist")
                raise SpecError(f"cohort {chain[-2]!r}: parent {name!r} does not exist")
            name = node.parent
        return tuple(chain)

    def root(self, cohort: str) -> str:
        """The root of ``cohort``'s tree."""
        return self.ancestors(cohort)[-1]

    def cluster_queue(self, name: str) -> str | None:
        """The ClusterQueue a job's ``queue`` names: a queue's own name, or a local queue's
        target; ``None`` if neither."""
        if name in self.queues:
            return name
        lq = self.local_queues.get(name)
        return lq.cluster_queue if lq is not None else None


def _check_flavors(owner: str, flavors: Mapping[GpuFlavor, FlavorQuota],
                   present: set[GpuFlavor] | None) -> None:
    if present is None:
        return
    for flavor in flavors:
        if flavor not in present:
            raise SpecError(f"{owner}: quota for flavor {flavor.name!r}, which the cluster "
                            f"does not have")
