"""Export Tessera's flavors and tenancy as Kueue manifests (``kueue.x-k8s.io/v1beta2``).

Teams moving to Kubernetes keep the same tenancy:

* each GPU flavor of the cluster → a **ResourceFlavor** whose ``nodeLabels`` select nodes by
  ``nvidia.com/gpu.product`` (the canonical flavor name is that label's value);
* each queue → a **ClusterQueue** covering ``nvidia.com/gpu`` (and the MIG profiles it holds
  quota in) with its per-flavor quotas, cohort, preemption, flavor fungibility and weight;
* each cohort → a **Cohort** with its parent, own quota and weight; each priority class → a
  **WorkloadPriorityClass**; each local queue → a **LocalQueue**, and one more of the same
  name per queue that has none;
* fair sharing → Kueue's **Configuration** (``kueue-configuration.yaml``, for Kueue's config
  map).

A one-number quota (GPUs of any flavor) is split across the cluster's flavors in proportion to
each flavor's share of the cluster (largest remainders, so the parts add up exactly), and its
queue goes into the cohort ``tessera`` with the other one-number queues, as Tessera always
shared their idle quota. An unlimited borrowing limit is left out, which Kueue reads as
unlimited. ``tessera serve --tenancy`` reads the files back (:mod:`tessera.live.kueue_read`),
and exporting what it read gives the same bytes.

What Kubernetes and Kueue accept, and how the export keeps to it:

* **Names.** Every object name is a DNS-1123 *label* (lower-case letters, digits and ``-``,
  starting and ending with a letter or digit, at most 63 characters). Kubernetes asks only for a
  DNS-1123 subdomain, but a LocalQueue's name goes into the ``kueue.x-k8s.io/queue-name`` label
  of every job and Kueue copies a ClusterQueue's name into a pod label, and label values stop at
  63 characters. A Tessera queue name that is not a label already (tenancy accepts 64 characters)
  is mapped by :func:`k8s_name` and reported in :attr:`KueueExport.renamed`; two queues that map
  to one name are an error naming both, never one object silently replacing the other.
* **Namespace.** The LocalQueues' namespace must be a DNS-1123 label (:func:`check_namespace`).
* **Fair-sharing weight.** A Kubernetes quantity, written as an integer or a canonical quantity
  string (``"500m"``, ``"2n"``) by :func:`kueue_weight`. Quantities count in steps of 10⁻⁹ and
  Kueue wants a positive weight above 10⁻⁹, so a weight that rounds to 1n or less is an error.
* **YAML.** Kubernetes reads manifests with a YAML 1.1/1.2 reader for which a plain ``1e3`` is a
  number and a plain ``y`` a boolean; every string that such a reader could take for anything
  else is quoted (:class:`ManifestDumper`).

The bundled schemas in ``tessera/data/kueue`` (Kueue v0.19.2's CRDs) are what the tests check
the exported documents against.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import yaml

from tessera.errors import SpecError
from tessera.live.kube_values import format_duration
from tessera.live.kueue_read import (
    API_VERSION,
    CONFIG_API_VERSION,
    CPU_ONLY_CPUS_ANNOTATION,
    CPU_ONLY_MEMORY_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MIN_ADMITTED_ANNOTATION,
)
from tessera.live.store import Store
from tessera.live.tenancy import load_tenancy
from tessera.live.tenancy_file import load_tenancy_file
from tessera.live.tenancy_yaml import LoadedTenancy
from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.model.gpus import GpuFlavor
from tessera.sched.core.mig_quota import MigQuotas, mig_resource
from tessera.sched.core.quotas import Cohort, FlavorQuota
from tessera.sched.core.snapshot import QueueQuota
from tessera.sched.core.tenancy import Tenancy as QuotaTree

COHORT = "tessera"

LABEL_MAX = 63
"""The longest DNS-1123 label (and label value) Kubernetes accepts."""

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_RULE = ("lower-case letters, digits and '-', starting and ending with a letter or digit, "
               f"at most {LABEL_MAX} characters")

_NANO = 10**9
_QUANTITY_MAX = 2**63 - 1
"""Kubernetes documents no quantity above 2⁶³−1 (larger ones are capped)."""


def is_dns1123_label(text: str) -> bool:
    """Whether ``text`` is a DNS-1123 label, as Kubernetes checks namespaces and label values."""
    return len(text) <= LABEL_MAX and _DNS1123_LABEL.fullmatch(text) is not None


def k8s_name(text: str) -> str:
    """The DNS-1123 label Tessera writes for ``text``; ``""`` when nothing usable is left.

    Lower-cases, turns each run of other characters into ``-``, drops leading ``-``, keeps the
    first 63 characters and then drops trailing ``-`` (cutting first could end on a dash).
    A name that is already a label comes back unchanged.

    >>> k8s_name("V100-16GB")
    'v100-16gb'
    >>> len(k8s_name("a" * 62 + "-b"))  # cut to 63 ends on the dash, which goes too
    62
    """
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).lstrip("-")[:LABEL_MAX].rstrip("-")


def check_namespace(namespace: str) -> None:
    """Refuse ``namespace`` unless Kubernetes accepts it as a namespace name (a DNS-1123 label).

    Raises:
        SpecError: naming the rule, and a valid spelling when :func:`k8s_name` finds one.
    """
    if is_dns1123_label(namespace):
        return
    hint = k8s_name(namespace)
    suggestion = f" (did you mean {hint!r}?)" if hint else ""
    raise SpecError(f"namespace {namespace!r} is not a valid Kubernetes namespace: use "
                    f"{_LABEL_RULE}{suggestion}")


def kueue_weight(weight: float) -> int | str:
    """A fair-sharing weight as the Kubernetes quantity Kueue reads (``spec.fairSharing.weight``).

    Kueue's schema takes an integer or a quantity string, never a YAML float, and its webhook a
    weight of 0 or above 1n (10⁻⁹). The weight is rounded to the nearest 1n, the step of a
    quantity, and written in canonical form: a whole number as an integer, otherwise the
    largest of the suffixes ``m`` (10⁻³), ``u`` (10⁻⁶) and ``n`` (10⁻⁹) that keeps it whole.

    >>> kueue_weight(2.0), kueue_weight(0.5), kueue_weight(1.25e-3), kueue_weight(3e-9)
    (2, '500m', '1250u', '3n')

    Raises:
        SpecError: for a weight that is negative, not finite, so small that it rounds to 1n or
            less, or above 2⁶³−1.
    """
    if not math.isfinite(weight) or weight < 0:
        raise SpecError(f"fair-sharing weight {weight!r} must be a finite number >= 0")
    if weight > _QUANTITY_MAX:
        raise SpecError(f"fair-sharing weight {weight:g} is larger than a Kubernetes quantity "
                        f"holds ({_QUANTITY_MAX})")
    nano = int((Decimal(repr(weight)) * _NANO).to_integral_value(ROUND_HALF_UP))
    if nano == 1 or (nano == 0 and weight > 0):
        raise SpecError(f"fair-sharing weight {weight:g} rounds to {nano}n (Kubernetes quantities "
                        "count in steps of 1n = 1e-9) and Kueue needs a weight above 1n")
    if nano % _NANO == 0:
        return nano // _NANO
    for step, suffix in ((10**6, "m"), (10**3, "u")):
        if nano % step == 0:
            return f"{nano // step}{suffix}"
    return f"{nano}n"


def split_proportionally(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` into integer parts proportional to ``weights`` (largest remainders)."""
    s = sum(weights)
    if s == 0:
        return [0] * len(weights)
    exact = [total * w / s for w in weights]
    parts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: -(exact[i] - parts[i]))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def _kueue_names(names: list[str], what: str) -> dict[str, str]:
    """Map each of ``names`` to its Kueue name, refusing empty results and collisions."""
    taken: dict[str, str] = {}
    for name in names:
        k = k8s_name(name)
        if not k:
            raise SpecError(f"{what} {name!r} has no characters a Kubernetes name can use; "
                            f"rename it ({_LABEL_RULE})")
        if k in taken:
            raise SpecError(
                f"{what}s {taken[k]!r} and {name!r} would both be exported as {k!r} (Kueue names "
                f"are DNS-1123 labels: {_LABEL_RULE}); rename one of them")
        taken[k] = name
    return {name: k for k, name in taken.items()}


@dataclass(frozen=True, slots=True)
class KueueExport:
    """The Kueue objects for one cluster and tenancy, as Kubernetes documents.

    Attributes:
        resource_flavors: one ResourceFlavor per GPU flavor, in the cluster's order.
        cluster_queues: one ClusterQueue per queue.
        local_queues: the tenancy's LocalQueues, and one per queue that has none of its name
            (in the chosen namespace), sorted by name.
        renamed: Tessera queue name → its Kueue name, for the queues whose names had to change.
        cohorts: one Cohort per cohort of the tree (and ``tessera`` for one-number queues
            without a cohort, which share it as they always have).
        priority_classes: one WorkloadPriorityClass per priority class.
        configuration: Kueue's ``Configuration`` (fair sharing and its usage half-life), when
            the tenancy sets either; it belongs in Kueue's config map, not ``kubectl apply``.
    """

    resource_flavors: list[dict[str, Any]]
    cluster_queues: list[dict[str, Any]]
    local_queues: list[dict[str, Any]]
    renamed: dict[str, str] = field(default_factory=dict)
    cohorts: list[dict[str, Any]] = field(default_factory=list)
    priority_classes: list[dict[str, Any]] = field(default_factory=list)
    configuration: list[dict[str, Any]] = field(default_factory=list)

    def files(self) -> dict[str, list[dict[str, Any]]]:
        """The documents by file stem, in the order to apply them (flavors and cohorts
        before the queues that name them); kinds with no object get no file."""
        out = {"resource-flavors": self.resource_flavors, "cohorts": self.cohorts,
               "cluster-queues": self.cluster_queues, "local-queues": self.local_queues,
               "priority-classes": self.priority_classes,
               "kueue-configuration": self.configuration}
        always = ("resource-flavors", "cluster-queues", "local-queues")
        return {k: v for k, v in out.items() if v or k in always}


def _split(quota: FlavorQuota, flavors: list[GpuFlavor], counts: list[int]
           ) -> dict[GpuFlavor, FlavorQuota]:
    """An any-flavor quota line split across ``flavors`` in proportion to ``counts``."""
    nominal = split_proportionally(quota.nominal_gpus, counts)
    borrow = (None if quota.borrowing_limit_gpus is None
              else split_proportionally(quota.borrowing_limit_gpus, counts))
    lend = (None if quota.lending_limit_gpus is None
            else split_proportionally(quota.lending_limit_gpus, counts))
    return {f: FlavorQuota(nominal[i], None if borrow is None else borrow[i],
                           None if lend is None else min(lend[i], nominal[i]))
            for i, f in enumerate(flavors)}


def _line(resource: str, nominal: int, borrow: int | None, lend: int | None) -> dict[str, Any]:
    res: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
    if borrow is not None:
        res["borrowingLimit"] = borrow
    if lend is not None:
        res["lendingLimit"] = lend
    return res


def _resource_groups(quotas: dict[GpuFlavor, FlavorQuota], names: dict[str, str],
                     mig: MigQuotas | None = None) -> list[dict[str, Any]]:
    """One resource group covering ``nvidia.com/gpu`` and every MIG profile the owner holds
    (Kueue wants each flavor of a group to list every covered resource: 0 where it has none)."""
    mig = mig or {}
    profiles: list[str] = []
    for lines in mig.values():
        profiles += [p for p in lines if p not in profiles]
    entries = []
    for flavor, q in quotas.items():
        resources = [_line(GPU_RESOURCE, q.nominal_gpus, q.borrowing_limit_gpus,
                           q.lending_limit_gpus)]
        for p in profiles:
            m = mig.get(flavor, {}).get(p)
            resources.append(_line(mig_resource(p), 0, None, None) if m is None else _line(
                mig_resource(p), m.nominal_slices, m.borrowing_limit_slices,
                m.lending_limit_slices))
        entries.append({"name": names[flavor.short], "resources": resources})
    return [{"coveredResources": [GPU_RESOURCE, *map(mig_resource, profiles)],
             "flavors": entries}]


def _weight(owner: str, weight: float) -> int | str:
    try:
        return kueue_weight(weight)
    except SpecError as e:
        raise SpecError(f"{owner}: {e}") from None


def _seconds_text(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def manifests(cluster: ClusterSpec, tenancy: LoadedTenancy | Sequence[QueueQuota],
              namespace: str = "default") -> KueueExport:
    """The Kueue objects for ``cluster`` and ``tenancy``, new LocalQueues in ``namespace``.

    Everything the typed tenancy holds is written: per-flavor quotas (with MIG slices),
    cohorts with their parents, quotas and weights, preemption, flavor fungibility, weights,
    priority classes, local queues, fair sharing (Kueue's ``Configuration``) and the time
    sharing minimum and the CPU-only jobs' ``cpus``/``memory`` quota (annotations,
    :data:`~tessera.live.kueue_read.MIN_ADMITTED_ANNOTATION` and beside it).
    A one-number quota is split across the cluster's flavors in proportion to their counts.
    Reading the result back (:mod:`tessera.live.kueue_read`) and exporting it again gives
    the same bytes.

    Raises:
        SpecError: an invalid namespace, a cluster without GPUs, quota for a flavor the cluster
            lacks, two queues (or flavors, cohorts) with the same Kueue name, or a
            fair-sharing weight Kueue cannot hold.
    """
    check_namespace(namespace)
    by_flavor = cluster.gpus_by_flavor()
    if not by_flavor:
        raise SpecError(f"cluster {cluster.name!r} has no GPUs: a ClusterQueue needs a flavor")
    if isinstance(tenancy, LoadedTenancy):
        tenancy.check(list(by_flavor))
        loaded = tenancy
    else:
        loaded = LoadedTenancy(QuotaTree({q.name: q for q in tenancy}))
    tree = loaded.tree
    flavors = list(by_flavor)
    counts = [by_flavor[f] for f in flavors]
    flavor_names = _kueue_names([f.short for f in flavors], "flavor")
    queue_names = _kueue_names(list(tree.queues), "queue")
    implicit = any(q.cohort is None and not q.by_flavor for q in tree.queues.values())
    cohort_list = list(tree.cohorts) + ([COHORT] if implicit and COHORT not in tree.cohorts
                                        else [])
    cohort_names = _kueue_names(cohort_list, "cohort")
    rf = [{"apiVersion": API_VERSION, "kind": "ResourceFlavor",
           "metadata": {"name": flavor_names[f.short]},
           "spec": {"nodeLabels": {GPU_PRODUCT_LABEL: f.name}}} for f in flavors]
    cohorts = []
    for name in cohort_list:
        c = tree.cohorts.get(name) or Cohort(name)
        spec: dict[str, Any] = {}
        if c.parent is not None:
            spec["parentName"] = cohort_names[c.parent]
        own = (dict(c.flavors) if c.flavors else {} if c.any_flavor is None
               else _split(c.any_flavor, flavors, counts))
        if own:
            spec["resourceGroups"] = _resource_groups(own, flavor_names)
        spec["fairSharing"] = {"weight": _weight(f"cohort {name!r}", c.weight)}
        cohorts.append({"apiVersion": API_VERSION, "kind": "Cohort",
                        "metadata": {"name": cohort_names[name]}, "spec": spec})
    cqs = []
    for q in tree.queues.values():
        name = queue_names[q.name]
        meta: dict[str, Any] = {"name": name}
        notes = {k: v for k, v in (
            (MIN_ADMITTED_ANNOTATION, q.min_admitted_s), (CPU_ONLY_CPUS_ANNOTATION, q.nominal_cpus),
            (CPU_ONLY_MEMORY_ANNOTATION, q.nominal_mem_gib)) if v is not None}
        if notes:  # (Tessera's own: Kueue has no field for them)
            meta["annotations"] = {k: _seconds_text(v) for k, v in notes.items()}
        spec = {}
        cohort = q.cohort if q.cohort is not None else COHORT if not q.by_flavor else None
        if cohort is not None:
            spec["cohortName"] = cohort_names[cohort]
        quotas = dict(q.flavors) if q.by_flavor else _split(q.any_flavor, flavors, counts)
        if cohort is None:  # nothing to borrow from; Kueue refuses the limit without a cohort
            quotas = {f: replace(fq, borrowing_limit_gpus=None) for f, fq in quotas.items()}
        spec.update({
            "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": q.preemption.reclaim_within_cohort.value,
                           "withinClusterQueue": q.preemption.within_queue.value},
            "flavorFungibility": {"whenCanBorrow": q.fungibility.when_can_borrow.value,
                                  "whenCanPreempt": q.fungibility.when_can_preempt.value},
            "fairSharing": {"weight": _weight(f"queue {q.name!r}", q.weight)},
            "resourceGroups": _resource_groups(quotas, flavor_names, loaded.mig.get(q.name))})
        cqs.append({"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": meta,
                    "spec": spec})
    local: dict[str, tuple[str, str]] = {
        queue_names[q]: (namespace, queue_names[q]) for q in tree.queues
        if q not in tree.local_queues}
    for lq in tree.local_queues.values():
        local[lq.name] = (lq.namespace, queue_names[lq.cluster_queue])
    lqs = [{"apiVersion": API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": n, "namespace": ns}, "spec": {"clusterQueue": cq}}
           for n, (ns, cq) in sorted(local.items())]
    classes = [{"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass",
                "metadata": {"name": pc.name}, "value": pc.value}
               for pc in tree.priority_classes.values()]
    renamed = {q: k for q, k in queue_names.items() if q != k}
    return KueueExport(rf, cqs, lqs, renamed, cohorts, classes, _configuration(tree))


def _configuration(tree: QuotaTree) -> list[dict[str, Any]]:
    fs = tree.fair_sharing
    if not fs.enabled and fs.usage_half_life_s is None:
        return []
    doc: dict[str, Any] = {"apiVersion": CONFIG_API_VERSION, "kind": "Configuration"}
    if fs.enabled:
        doc["fairSharing"] = {"preemptionStrategies": [s.value for s in fs.strategies]}
    if fs.usage_half_life_s is not None:
        doc["admissionFairSharing"] = {
            "usageHalfLifeTime": format_duration(fs.usage_half_life_s)}
    return [doc]


# A plain scalar that a Kubernetes YAML reader (YAML 1.1 or 1.2) could resolve to a number,
# boolean or null: anything starting like a number, the special floats, and the bool/null words.
_NOT_PLAIN = re.compile(
    r"[-+.]?[0-9].*|[-+]?\.(inf|nan)|y|n|yes|no|on|off|true|false|null|~", re.IGNORECASE)


class ManifestDumper(yaml.SafeDumper):
    """A YAML dumper whose strings stay strings for Kubernetes.

    PyYAML quotes what *it* would read back as a non-string, but it follows YAML 1.1, where
    ``1e3`` (no dot) is a string and ``y`` is not a boolean. Kubernetes' reader takes both for a
    number and a boolean, so a queue named ``1e3`` would arrive as the number 1000. This dumper
    single-quotes every string a plain scalar would make ambiguous.
    """


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "'" if _NOT_PLAIN.fullmatch(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


ManifestDumper.add_representer(str, _represent_str)


def dump_documents(items: list[dict[str, Any]]) -> str:
    """``items`` as one multi-document YAML text that Kubernetes reads back unchanged."""
    return yaml.dump_all(items, Dumper=ManifestDumper, sort_keys=False)


def write_manifests(out_dir: Path, export: KueueExport) -> list[Path]:
    """Write one YAML file per object kind into ``out_dir``; return their paths.

    Raises:
        SpecError: when the directory or a file cannot be written.
    """
    paths = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for stem, items in export.files().items():
            p = out_dir / f"{stem}.yaml"
            p.write_text(dump_documents(items))
            paths.append(p)
    except OSError as e:
        raise SpecError(f"cannot write the manifests to {out_dir}: {e.strerror or e}") from None
    return paths


def export_from_state(state_dir: Path, cluster_text: str | None, gpus_per_server: int,
                      namespace: str, tenancy_path: Path | None = None) -> KueueExport:
    """The Kueue objects for a service's state dir (or the ``--tenancy`` file ``tenancy_path``)
    and its (or the given) cluster.

    Raises:
        SpecError: an invalid namespace (checked first), a missing or malformed tenancy config
            or cluster, or anything :func:`manifests` refuses.
    """
    # lazy: live.server loads the service, its executors and every policy (+0.8 s measured)
    from tessera.live.server import DEFAULT_CLUSTER

    check_namespace(namespace)
    if tenancy_path is not None:
        loaded = load_tenancy_file(tenancy_path)
    else:
        live = load_tenancy(state_dir)
        loaded = LoadedTenancy(live.quota_tree, live.mig_quotas)
    if cluster_text is None and (state_dir / "state.db").exists():
        store = Store(state_dir / "state.db")
        cluster_text = store.meta("cluster")
        gpus_per_server = int(store.meta("gpus_per_server") or gpus_per_server)
        store.close()
    cluster = load_cluster(cluster_text or DEFAULT_CLUSTER, gpus_per_server)
    return manifests(cluster, loaded, namespace)
