"""Read Kueue's own objects (``kueue.x-k8s.io/v1beta2``) into Tessera's tenancy.

A platform team that runs Kueue hands Tessera the same YAML it applies to its cluster (one
multi-document file or a folder of them): ResourceFlavors, ClusterQueues, Cohorts,
LocalQueues, WorkloadPriorityClasses, and optionally Kueue's ``Configuration``
(``config.kueue.x-k8s.io/v1beta2``) for fair sharing. Each field of each object's ``spec`` is
either **mapped** to a typed value of :mod:`tessera.sched.core.quotas` /
:mod:`tessera.sched.core.tenancy`, **accepted** because its value is what Tessera does anyway
(``queueingStrategy: BestEffortFIFO``, ``stopPolicy: None``, an empty ``namespaceSelector``),
or **refused** with its path (``ClusterQueue 'a': spec.admissionChecksStrategy: not
supported ...``) -- never ignored. The full table, with what each mapped field does, is in
docs/tenancy.md; :data:`REFUSED` holds the reasons.

``metadata`` gives names (and a LocalQueue's namespace); ``status``, labels and the other
annotations are what a cluster records, not settings, and are skipped. One annotation is
Tessera's own: ``tessera.io/min-admitted-s`` on a ClusterQueue carries the queue's time-sharing
minimum, which Kueue has no field for (so ``export kueue`` -> import keeps it);
``tessera.io/cpu-only-cpus`` and ``tessera.io/cpu-only-memory-gib`` carry its ``cpus``/``memory``
quota, charged by CPU-only jobs alone (Kueue's ``cpu``/``memory`` quota charges every workload).
Any other ``tessera.io/`` annotation, on any object, is refused with one line naming the key
and the known ones: Tessera owns the prefix, so it is a typo, and skipping it dropped a quota.

Quantities are Kubernetes quantity strings or numbers (``8``, ``"500m"``, ``"1k"``); GPU and
MIG-slice quotas must be whole and non-negative, a weight non-negative.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from tessera.errors import SpecError
from tessera.live.kube_values import parse_duration_s, parse_quantity
from tessera.live.tenancy_yaml import LoadedTenancy
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.sched.core.mig_quota import MigQuota, mig_profile_of
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

API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MIN_ADMITTED_ANNOTATION = "tessera.io/min-admitted-s"
#: A queue's ``cpus``/``memory`` quota (CPUs, GiB): charged by CPU-only jobs alone, which is
#: not Kueue's ``cpu``/``memory`` quota (that charges every workload), so an annotation.
CPU_ONLY_CPUS_ANNOTATION = "tessera.io/cpu-only-cpus"
CPU_ONLY_MEMORY_ANNOTATION = "tessera.io/cpu-only-memory-gib"
#: Tessera's annotations a ClusterQueue may carry; any other ``tessera.io/`` key, on any
#: object, is refused (:func:`_own_annotations`).
CLUSTER_QUEUE_ANNOTATIONS = (MIN_ADMITTED_ANNOTATION, CPU_ONLY_CPUS_ANNOTATION,
                             CPU_ONLY_MEMORY_ANNOTATION)
TESSERA_PREFIX = "tessera.io/"
KINDS = ("ResourceFlavor", "ClusterQueue", "Cohort", "LocalQueue", "WorkloadPriorityClass")

_NOT_RUN = "Tessera runs no Kubernetes controllers or admission checks"
REFUSED: dict[str, str] = {
    "ClusterQueue.spec.admissionChecksStrategy": _NOT_RUN,
    "ClusterQueue.spec.admissionScope": "admission fair sharing by LocalQueue usage is not "
                                        "supported (Tessera orders queues, not LocalQueues)",
    "ClusterQueue.spec.concurrentAdmissionPolicy": "Tessera admits a job on one flavor at a time",
    "ClusterQueue.spec.preemption.borrowWithinCohort": "preempting while borrowing is not "
                                                       "supported (only policy: Never)",
    "ClusterQueue.spec.flavorFungibility.preference": "use whenCanBorrow and whenCanPreempt",
    "ClusterQueue.spec.namespaceSelector": "Tessera's jobs have no namespaces (only {} is "
                                           "accepted)",
    "ClusterQueue.spec.queueingStrategy": "Tessera queues BestEffortFIFO (StrictFIFO is not "
                                          "supported)",
    "ClusterQueue.spec.stopPolicy": "stopping a queue is not supported (only None)",
    "LocalQueue.spec.fairSharing": "a LocalQueue has no fair-sharing weight in Tessera",
    "LocalQueue.spec.stopPolicy": "stopping a queue is not supported (only None)",
    "ResourceFlavor.spec.nodeLabels": f"Tessera selects a flavor's nodes by {GPU_PRODUCT_LABEL} "
                                      "only",
    "ResourceFlavor.spec.nodeTaints": "Tessera's nodes have no taints",
    "ResourceFlavor.spec.tolerations": "Tessera's nodes have no taints",
    "ResourceFlavor.spec.topologyName": "topology-aware scheduling is not supported",
}
"""Why each Kueue field Tessera cannot honour is refused, by ``Kind.path`` (a field below one
of these is refused for the same reason); docs/tenancy.md lists them."""

Doc = dict[str, Any]


def refusal_reason(kind: str, path: str) -> str | None:
    """Why ``kind``'s field ``path`` (indices like ``[0]`` allowed) is refused, or ``None``."""
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    for n in range(len(parts), 0, -1):
        why = REFUSED.get(f"{kind}.{'.'.join(parts[:n])}")
        if why is not None:
            return why
    return None


def _refuse(owner: str, path: str, reason: str | None = None) -> SpecError:
    why = reason or refusal_reason(owner.split(" ")[0], path) or "unknown field"
    return SpecError(f"{owner}: {path}: not supported ({why})")


def _only(owner: str, path: str, obj: object, allowed: Iterable[str]) -> dict[str, Any]:
    """``obj`` as a mapping whose keys are all ``allowed``; anything else is refused."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise SpecError(f"{owner}: {path}: must be a mapping, got {type(obj).__name__}")
    keys = set(allowed)
    for k in obj:
        if k not in keys:
            raise _refuse(owner, f"{path}.{k}")
    return obj


def _count(owner: str, path: str, value: object, unit: str) -> int:
    q = parse_quantity(owner, path, value)
    if q < 0:
        raise SpecError(f"{owner}: {path}: must be >= 0, got {value!r}")
    if q != q.to_integral_value():
        raise SpecError(f"{owner}: {path}: must be a whole number of {unit}, got {value!r}")
    return int(q)


def _weight(owner: str, path: str, fair: object) -> float:
    spec = _only(owner, path, fair, ("weight",))
    if "weight" not in spec:
        return 1.0
    w = parse_quantity(owner, f"{path}.weight", spec["weight"])
    if w < 0:
        raise SpecError(f"{owner}: {path}.weight: must be >= 0, got {spec['weight']!r}")
    return float(w)


def _enum(owner: str, path: str, value: object, kind: type[Any]) -> Any:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(e.value for e in kind)
        raise SpecError(f"{owner}: {path}: {value!r} is not one of {known}") from None


def _name(doc: Doc, where: str) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}: metadata.name is required")
    return name


class _Reader:
    """Reads one set of documents; each ``_read_*`` maps one object."""

    def __init__(self) -> None:
        self.flavors: dict[str, GpuFlavor] = {}
        self.queues: dict[str, QueueQuota] = {}
        self.mig: dict[str, dict[GpuFlavor, dict[str, MigQuota]]] = {}
        self.cohorts: dict[str, Cohort] = {}
        self.classes: dict[str, PriorityClass] = {}
        self.local_queues: dict[str, LocalQueue] = {}
        self.fair_sharing = FairSharing()

    def read(self, docs: list[tuple[str, Doc]]) -> LoadedTenancy:
        by_kind: dict[str, list[tuple[str, Doc]]] = {k: [] for k in (*KINDS, "Configuration")}
        for where, doc in docs:
            by_kind[_kind(where, doc)].append((where, doc))
        for where, doc in by_kind["ResourceFlavor"]:  # flavors first: the others name them
            self._flavor(where, doc)
        for kind, read in (("Cohort", self._cohort), ("ClusterQueue", self._cluster_queue),
                           ("LocalQueue", self._local_queue),
                           ("WorkloadPriorityClass", self._priority_class),
                           ("Configuration", self._configuration)):
            for where, doc in by_kind[kind]:
                read(where, doc)
        tree = Tenancy(self.queues, self.cohorts, self.fair_sharing, self.classes,
                       self.local_queues)
        loaded = LoadedTenancy(tree, {q: dict(m) for q, m in self.mig.items()})
        loaded.check()
        return loaded

    def _top(self, owner: str, doc: Doc, extra: tuple[str, ...] = ("spec",),
             notes: tuple[str, ...] = ()) -> Doc:
        """``doc``'s top-level keys are known (``extra``: the kind's own besides ``spec``) and
        so are its ``tessera.io/`` annotations (``notes``: the ones this kind reads)."""
        for k in doc:
            if k not in ("apiVersion", "kind", "metadata", "status", *extra):
                raise _refuse(owner, k)
        _own_annotations(owner, doc, notes)
        return doc

    def _flavor(self, where: str, doc: Doc) -> None:
        name = _name(doc, where)
        owner = f"ResourceFlavor {name!r}"
        self._top(owner, doc)
        spec = _only(owner, "spec", doc.get("spec"), ("nodeLabels",))
        labels = _only(owner, "spec.nodeLabels", spec.get("nodeLabels"), (GPU_PRODUCT_LABEL,))
        product = labels.get(GPU_PRODUCT_LABEL, name)
        try:
            flavor = resolve_flavor(str(product))
        except Exception as e:  # UnknownFlavorError names the known flavors
            path = f"spec.nodeLabels.{GPU_PRODUCT_LABEL}" if labels else "metadata.name"
            raise SpecError(f"{owner}: {path}: {e}") from None
        if name in self.flavors:
            raise SpecError(f"{owner} is defined twice")
        self.flavors[name] = flavor

    def _groups(self, owner: str, groups: object, *, mig_allowed: bool
                ) -> tuple[dict[GpuFlavor, FlavorQuota], dict[GpuFlavor, dict[str, MigQuota]]]:
        """``spec.resourceGroups`` as per-flavor GPU quotas and MIG lines."""
        quotas: dict[GpuFlavor, FlavorQuota] = {}
        mig: dict[GpuFlavor, dict[str, MigQuota]] = {}
        if groups is None:
            return quotas, mig
        if not isinstance(groups, list):
            raise SpecError(f"{owner}: spec.resourceGroups: must be a list")
        for g, group in enumerate(groups):
            gp = f"spec.resourceGroups[{g}]"
            group = _only(owner, gp, group, ("coveredResources", "flavors"))
            covered = group.get("coveredResources") or []
            for r, res in enumerate(covered):
                profile = mig_profile_of(str(res))
                if res != GPU_RESOURCE and (profile is None or not mig_allowed):
                    what = "MIG slices on a Cohort" if profile else f"resource {res!r}"
                    raise _refuse(owner, f"{gp}.coveredResources[{r}]",
                                  f"{what}; Tessera's quotas count {GPU_RESOURCE} and, on "
                                  "ClusterQueues, MIG slices nvidia.com/mig-<profile>")
            for f, entry in enumerate(group.get("flavors") or []):
                fp = f"{gp}.flavors[{f}]"
                entry = _only(owner, fp, entry, ("name", "resources"))
                rf = entry.get("name")
                flavor = self.flavors.get(str(rf))
                if flavor is None:
                    raise SpecError(f"{owner}: {fp}.name: ResourceFlavor {rf!r} is not defined")
                if flavor in quotas:
                    raise SpecError(f"{owner}: {fp}.name: flavor {flavor.short} is listed twice")
                quotas[flavor] = FlavorQuota(0)
                for r, res in enumerate(entry.get("resources") or []):
                    rp = f"{fp}.resources[{r}]"
                    res = _only(owner, rp, res,
                                ("name", "nominalQuota", "borrowingLimit", "lendingLimit"))
                    rname = res.get("name")
                    if rname not in covered:
                        raise SpecError(f"{owner}: {rp}.name: {rname!r} is not among the "
                                        f"group's coveredResources")
                    unit = "GPUs" if rname == GPU_RESOURCE else "MIG slices"
                    if "nominalQuota" not in res:
                        raise SpecError(f"{owner}: {rp}.nominalQuota is required")
                    nominal = _count(owner, f"{rp}.nominalQuota", res["nominalQuota"], unit)
                    borrow, lend = (
                        None if res.get(k) is None else _count(owner, f"{rp}.{k}", res[k], unit)
                        for k in ("borrowingLimit", "lendingLimit"))
                    if rname == GPU_RESOURCE:
                        quotas[flavor] = FlavorQuota(nominal, borrow, lend)
                    elif nominal or borrow is not None or lend is not None:
                        profile = mig_profile_of(str(rname))
                        assert profile is not None  # checked with coveredResources
                        mig.setdefault(flavor, {})[profile] = MigQuota(profile, nominal,
                                                                       borrow, lend)
        return quotas, mig

    def _cluster_queue(self, where: str, doc: Doc) -> None:
        name = _name(doc, where)
        owner = f"ClusterQueue {name!r}"
        self._top(owner, doc, notes=CLUSTER_QUEUE_ANNOTATIONS)
        if name in self.queues:
            raise SpecError(f"{owner} is defined twice")
        spec = _only(owner, "spec", doc.get("spec"), (
            "cohortName", "resourceGroups", "preemption", "flavorFungibility", "fairSharing",
            "namespaceSelector", "queueingStrategy", "stopPolicy"))
        if spec.get("namespaceSelector") not in (None, {}):
            raise _refuse(owner, "spec.namespaceSelector")
        if spec.get("queueingStrategy", "BestEffortFIFO") != "BestEffortFIFO":
            raise _refuse(owner, "spec.queueingStrategy")
        if spec.get("stopPolicy", "None") != "None":
            raise _refuse(owner, "spec.stopPolicy")
        pre = _only(owner, "spec.preemption", spec.get("preemption"),
                    ("reclaimWithinCohort", "withinClusterQueue", "borrowWithinCohort"))
        bwc = _only(owner, "spec.preemption.borrowWithinCohort", pre.get("borrowWithinCohort"),
                    ("policy",))
        if bwc.get("policy", "Never") != "Never":
            raise _refuse(owner, "spec.preemption.borrowWithinCohort.policy")
        preemption = QueuePreemption(
            _enum(owner, "spec.preemption.reclaimWithinCohort",
                  pre.get("reclaimWithinCohort", "Never"), ReclaimWithinCohort),
            _enum(owner, "spec.preemption.withinClusterQueue",
                  pre.get("withinClusterQueue", "Never"), WithinQueue))
        fun = _only(owner, "spec.flavorFungibility", spec.get("flavorFungibility"),
                    ("whenCanBorrow", "whenCanPreempt"))
        fungibility = FlavorFungibility(
            _enum(owner, "spec.flavorFungibility.whenCanBorrow",
                  fun.get("whenCanBorrow", "MayStopSearch"), WhenCanBorrow),
            _enum(owner, "spec.flavorFungibility.whenCanPreempt",
                  fun.get("whenCanPreempt", "TryNextFlavor"), WhenCanPreempt))
        weight = _weight(owner, "spec.fairSharing", spec.get("fairSharing"))
        quotas, mig = self._groups(owner, spec.get("resourceGroups"), mig_allowed=True)
        cohort = spec.get("cohortName")
        if cohort is not None and (not isinstance(cohort, str) or cohort not in self.cohorts):
            raise SpecError(f"{owner}: spec.cohortName: cohort {cohort!r} does not exist "
                            "(define it as a Cohort)")
        self.queues[name] = replace(QueueQuota.per_flavor(
            name, quotas, weight=weight, cohort=cohort, preemption=preemption,
            fungibility=fungibility, min_admitted_s=_min_admitted(owner, doc)),
            nominal_cpus=_annotation(owner, doc, CPU_ONLY_CPUS_ANNOTATION, "CPUs"),
            nominal_mem_gib=_annotation(owner, doc, CPU_ONLY_MEMORY_ANNOTATION, "GiB"))
        if mig:
            self.mig[name] = mig

    def _cohort(self, where: str, doc: Doc) -> None:
        name = _name(doc, where)
        owner = f"Cohort {name!r}"
        self._top(owner, doc)
        if name in self.cohorts:
            raise SpecError(f"{owner} is defined twice")
        spec = _only(owner, "spec", doc.get("spec"),
                     ("parentName", "resourceGroups", "fairSharing"))
        quotas, _ = self._groups(owner, spec.get("resourceGroups"), mig_allowed=False)
        parent = spec.get("parentName")
        self.cohorts[name] = Cohort(name, None if parent is None else str(parent), quotas,
                                    None, _weight(owner, "spec.fairSharing",
                                                  spec.get("fairSharing")))

    def _local_queue(self, where: str, doc: Doc) -> None:
        name = _name(doc, where)
        owner = f"LocalQueue {name!r}"
        self._top(owner, doc)
        spec = _only(owner, "spec", doc.get("spec"), ("clusterQueue", "stopPolicy"))
        if spec.get("stopPolicy", "None") != "None":
            raise _refuse(owner, "spec.stopPolicy")
        if name in self.local_queues:
            raise SpecError(f"{owner} is defined twice (jobs name local queues without their "
                            "namespace)")
        target = spec.get("clusterQueue")
        if not isinstance(target, str) or not target:
            raise SpecError(f"{owner}: spec.clusterQueue is required")
        if target not in self.queues:
            raise SpecError(f"{owner}: spec.clusterQueue: ClusterQueue {target!r} does not "
                            "exist")
        if name in self.queues and target != name:
            raise SpecError(f"{owner}: metadata.name: {name!r} is a ClusterQueue's name, so a "
                            f"job naming it reaches that queue, not {target!r}; rename one")
        namespace = str(doc["metadata"].get("namespace") or "default")
        self.local_queues[name] = LocalQueue(name, namespace, target)

    def _priority_class(self, where: str, doc: Doc) -> None:
        name = _name(doc, where)
        owner = f"WorkloadPriorityClass {name!r}"
        self._top(owner, doc, ("value", "description"))
        value = doc.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{owner}: value: must be a whole number, got {value!r}")
        if name in self.classes:
            raise SpecError(f"{owner} is defined twice")
        self.classes[name] = PriorityClass(name, value)

    def _configuration(self, where: str, doc: Doc) -> None:
        owner = f"Configuration ({where})"
        self._top(owner, doc, ("fairSharing", "admissionFairSharing"))
        fair = _only(owner, "fairSharing", doc.get("fairSharing"), ("preemptionStrategies",))
        adm = _only(owner, "admissionFairSharing", doc.get("admissionFairSharing"),
                    ("usageHalfLifeTime",))
        strategies = tuple(
            _enum(owner, f"fairSharing.preemptionStrategies[{i}]", s, FairPreemption)
            for i, s in enumerate(fair.get("preemptionStrategies") or []))
        half_life = (None if "usageHalfLifeTime" not in adm else parse_duration_s(
            owner, "admissionFairSharing.usageHalfLifeTime", adm["usageHalfLifeTime"]))
        self.fair_sharing = FairSharing("fairSharing" in doc,
                                        strategies or FairSharing().strategies, half_life)


def _own_annotations(owner: str, doc: Doc, known: tuple[str, ...]) -> None:
    """Refuse a ``tessera.io/`` annotation that is not one of ``known`` (the ones this kind
    reads): Tessera owns that prefix, so such a key is a typo (``tessera.io/cpu-only-cpu``) or
    sits on the wrong object (a quota on a Cohort), and skipping it dropped a quota silently.
    Other prefixes are the cluster's records and stay skipped."""
    meta = doc.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(notes, dict):
        return  # (absent; not a mapping: _annotation says so for a ClusterQueue)
    for key in notes:
        if isinstance(key, str) and key.startswith(TESSERA_PREFIX) and key not in known:
            where = (f"known: {', '.join(known)}" if known
                     else "this kind carries none; they go on a ClusterQueue")
            raise SpecError(f"{owner}: metadata.annotations.{key}: unknown Tessera annotation "
                            f"({where})")


def _min_admitted(owner: str, doc: Doc) -> float | None:
    return _annotation(owner, doc, MIN_ADMITTED_ANNOTATION, "seconds")


def _annotation(owner: str, doc: Doc, key: str, unit: str) -> float | None:
    """The number in Tessera's annotation ``key`` (``None``: absent): a finite number >= 0,
    written as a string (Kubernetes annotations are strings) or a plain YAML number. Anything
    else -- a list, a mapping, ``true``, ``nan``, a negative amount -- is one line naming the
    key (a torn annotation raised a ``TypeError`` or was read as 1 before)."""
    notes = doc["metadata"].get("annotations") or {}
    if not isinstance(notes, dict):  # (a lost indent: the quota would vanish silently)
        raise SpecError(f"{owner}: metadata.annotations: not a mapping of strings (key: "
                        f"value), got {type(notes).__name__} {notes!r:.60}")
    text = notes.get(key)
    if text is None:
        return None
    bad = SpecError(f"{owner}: metadata.annotations.{key}: not a number of {unit} "
                    f"(>= 0): {text!r}")
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise bad
    try:
        value = float(text)
    except ValueError:
        raise bad from None
    if not (math.isfinite(value) and value >= 0):
        raise bad
    return value


def _kind(where: str, doc: object) -> str:
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: not a Kubernetes object (a mapping with apiVersion and kind)")
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if kind == "Configuration" and api == CONFIG_API_VERSION:
        return "Configuration"
    if kind not in KINDS:
        raise SpecError(f"{where}: kind {kind!r} is not supported (Tessera reads "
                        f"{', '.join(KINDS)} of {API_VERSION}, and Kueue's Configuration)")
    if api != API_VERSION:
        raise SpecError(f"{where}: {kind} {doc.get('metadata', {}).get('name')!r}: apiVersion "
                        f"{api!r} is not supported (Tessera reads {API_VERSION})")
    return str(kind)


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (about 10 times faster on a large tenancy)."""


def read_documents(path: Path) -> list[tuple[str, Any]]:
    """The YAML documents of a file, or of every ``*.yaml``/``*.yml`` file of a folder (sorted
    by name), each with where it came from (``document 2``, in a folder ``a.yaml document 2``);
    empty documents are skipped.

    Raises:
        SpecError: a path that does not exist, an empty folder, or invalid YAML.
    """
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        if not files:
            raise SpecError(f"{path}: the folder has no .yaml files")
    elif path.exists():
        files = [path]
    else:
        raise SpecError(f"{path} does not exist")
    out: list[tuple[str, Any]] = []
    for f in files:
        try:
            docs = list(yaml.load_all(f.read_text(), Loader=_LOADER))
        except yaml.YAMLError as e:
            raise SpecError(f"{f}: not valid YAML: {e}") from None
        except OSError as e:
            raise SpecError(f"cannot read {f}: {e.strerror or e}") from None
        prefix = f"{f.name} " if path.is_dir() else ""
        out += [(f"{prefix}document {i + 1}", d) for i, d in enumerate(docs) if d is not None]
    return out


def is_kueue(docs: list[tuple[str, Any]]) -> bool:
    """Whether the documents are Kubernetes objects (they carry ``apiVersion``/``kind``)."""
    return any(isinstance(d, dict) and ("apiVersion" in d or "kind" in d) for _, d in docs)


def tenancy_from_kueue(docs: list[tuple[str, Any]]) -> LoadedTenancy:
    """The tenancy Kueue's objects describe, checked (flavors against a cluster later).

    Raises:
        SpecError: naming the object and the field (``ClusterQueue 'a': spec.cohortName: ...``).
    """
    return _Reader().read(docs)

