"""A case's tenancy written as Kueue v1beta2 objects, for the live runs of the scenarios.

``tessera serve --tenancy PATH`` reads Kueue's own YAML (issue 32, part 5), so a live run of a
case hands the service exactly what a platform team would apply to a Kubernetes cluster:
one ``ResourceFlavor`` per GPU flavor (named by the flavor's short name, lower case), the
``Cohort`` tree (``spec.parentName``), one ``ClusterQueue`` per queue with its
``nvidia.com/gpu`` quota per flavor, its preemption rules, flavor fungibility and fair-sharing
weight, and one ``WorkloadPriorityClass`` per priority value the case's jobs use (named by
:func:`priority_class`).

Only what Kueue can say is written: a queue's ``min_admitted_s`` (time sharing, Kueue #8522)
has no Kueue field, and a case that needs it cannot be written here (:class:`ValueError`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tessera.model.gpus import GpuFlavor
from tessera.sched.core.quotas import FlavorQuota, QueueQuota
from tessera.sched.core.tenancy import Tenancy
from tests.scenarios.model import Case

API = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"


def flavor_name(flavor: GpuFlavor) -> str:
    """A ResourceFlavor's name for ``flavor`` (Kubernetes names are lower case)."""
    return flavor.short.lower()


def priority_class(value: int) -> str:
    """The WorkloadPriorityClass name for a priority value: ``p3``, ``p-minus-1``."""
    return f"p{value}" if value >= 0 else f"p-minus-{-value}"


def _quota(q: FlavorQuota) -> dict[str, Any]:
    out: dict[str, Any] = {"name": GPU, "nominalQuota": q.nominal_gpus}
    if q.borrowing_limit_gpus is not None:
        out["borrowingLimit"] = q.borrowing_limit_gpus
    if q.lending_limit_gpus is not None:
        out["lendingLimit"] = q.lending_limit_gpus
    return out


def _cluster_queue(q: QueueQuota) -> dict[str, Any]:
    if not q.by_flavor:
        raise ValueError(f"queue {q.name!r}: write a per-flavor quota for Kueue")
    if q.min_admitted_s is not None:
        raise ValueError(f"queue {q.name!r}: min_admitted_s has no Kueue field")
    spec: dict[str, Any] = {
        "resourceGroups": [{
            "coveredResources": [GPU],
            "flavors": [{"name": flavor_name(f), "resources": [_quota(fq)]}
                        for f, fq in q.flavors.items()],
        }],
        "preemption": {"reclaimWithinCohort": q.preemption.reclaim_within_cohort.value,
                       "withinClusterQueue": q.preemption.within_queue.value},
        "flavorFungibility": {"whenCanBorrow": q.fungibility.when_can_borrow.value,
                              "whenCanPreempt": q.fungibility.when_can_preempt.value},
    }
    if q.cohort is not None:
        spec["cohortName"] = q.cohort
    if q.weight != 1.0:
        spec["fairSharing"] = {"weight": str(q.weight)}
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": q.name},
            "spec": spec}


def kueue_objects(tenancy: Tenancy, flavors: Iterable[GpuFlavor],
                  priorities: Iterable[int]) -> list[dict[str, Any]]:
    """The Kueue objects that say what ``tenancy`` says."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": flavor_name(f)},
         "spec": {}} for f in dict.fromkeys(flavors)]
    for c in tenancy.cohorts.values():
        spec: dict[str, Any] = {}
        if c.parent is not None:
            spec["parentName"] = c.parent
        if c.flavors:
            spec["resourceGroups"] = [{
                "coveredResources": [GPU],
                "flavors": [{"name": flavor_name(f), "resources": [_quota(fq)]}
                            for f, fq in c.flavors.items()]}]
        if c.weight != 1.0:
            spec["fairSharing"] = {"weight": str(c.weight)}
        docs.append({"apiVersion": API, "kind": "Cohort", "metadata": {"name": c.name},
                     "spec": spec})
    docs += [_cluster_queue(q) for q in tenancy.queues.values()]
    docs += [{"apiVersion": API, "kind": "WorkloadPriorityClass",
              "metadata": {"name": priority_class(v)}, "value": v}
             for v in sorted(set(priorities))]
    return docs


def write_case_tenancy(case: Case, path: Path) -> Path:
    """Write ``case``'s tenancy as one multi-document Kueue YAML file at ``path``."""
    prios = [j.priority for j in case.running] + [j.priority for j in case.pending]
    docs = kueue_objects(case.tenancy, (p.flavor for p in case.cluster), prios)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path
