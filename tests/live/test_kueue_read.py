"""Kueue's own objects in (issue 32, part 5): ``kueue.x-k8s.io/v1beta2`` ResourceFlavor,
ClusterQueue, Cohort, LocalQueue and WorkloadPriorityClass (and Kueue's Configuration) read into
Tessera's typed tenancy; every spec field of the bundled CRD schemas mapped or refused with its
path, never ignored; the bad input of the issue refused with object and field named."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from tessera.errors import SpecError
from tessera.live.kube_values import parse_quantity
from tessera.live.kueue_read import REFUSED, refusal_reason
from tessera.live.tenancy_file import load_tenancy_file
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.mig_quota import MigQuota
from tessera.sched.core.quotas import (
    FlavorQuota,
    ReclaimWithinCohort,
    WhenCanBorrow,
    WhenCanPreempt,
    WithinQueue,
)
from tessera.sched.core.tenancy import FairPreemption

A100 = resolve_flavor("A100-80GB")
H100 = resolve_flavor("H100")
API = "kueue.x-k8s.io/v1beta2"
Doc = dict[str, Any]


def rf(name: str, product: str | None = None) -> Doc:
    spec = {"nodeLabels": {"nvidia.com/gpu.product": product}} if product else {}
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cohort(name: str, parent: str | None = None, **spec: Any) -> Doc:
    return {"apiVersion": API, "kind": "Cohort", "metadata": {"name": name},
            "spec": {**({"parentName": parent} if parent else {}), **spec}}


def cq(name: str, cohort_name: str | None = "research", **spec: Any) -> Doc:
    base: Doc = {
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"],
                            "flavors": [
                                {"name": "big", "resources": [
                                    {"name": "nvidia.com/gpu", "nominalQuota": 4,
                                     "borrowingLimit": "2", "lendingLimit": 1},
                                    {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 7}]},
                                {"name": "h100", "resources": [
                                    {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                                    {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 0}]}]}]}
    if cohort_name:
        base["cohortName"] = cohort_name
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {**base, **spec}}


def lq(name: str, target: str, namespace: str = "team-a", **spec: Any) -> Doc:
    return {"apiVersion": API, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": target, **spec}}


def wpc(name: str, value: Any) -> Doc:
    return {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value, "description": "for tests"}


def base_docs() -> list[Doc]:
    return [
        rf("big", "NVIDIA-A100-SXM4-80GB"), rf("h100"),  # by the label, or by the name
        cohort("org"), cohort("research", "org", fairSharing={"weight": "500m"}),
        cohort("team", "research", resourceGroups=[{"coveredResources": ["nvidia.com/gpu"],
                                                    "flavors": [{"name": "big", "resources": [
                                                        {"name": "nvidia.com/gpu",
                                                         "nominalQuota": 2}]}]}]),
        cq("vision", preemption={"reclaimWithinCohort": "Any",
                                 "withinClusterQueue": "LowerOrNewerEqualPriority",
                                 "borrowWithinCohort": {"policy": "Never"}},
           flavorFungibility={"whenCanBorrow": "TryNextFlavor",
                              "whenCanPreempt": "MayStopSearch"},
           fairSharing={"weight": 2}, namespaceSelector={}, queueingStrategy="BestEffortFIFO",
           stopPolicy="None"),
        lq("vision-team", "vision"),
        wpc("high", 1000),
        {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
         "fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]},
         "admissionFairSharing": {"usageHalfLifeTime": "1h30m"}},
    ]


def write(tmp_path: Path, docs: list[Doc], name: str = "kueue.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return p


def test_kueue_objects_become_the_typed_tenancy(tmp_path: Path) -> None:
    loaded = load_tenancy_file(write(tmp_path, base_docs()))
    tree = loaded.tree
    q = tree.queues["vision"]
    assert list(q.flavors) == [A100, H100]
    assert q.flavors[A100] == FlavorQuota(4, 2, 1) and q.flavors[H100] == FlavorQuota(8)
    assert q.cohort == "research" and q.weight == 2.0
    assert q.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY
    assert q.preemption.within_queue is WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
    assert q.fungibility.when_can_borrow is WhenCanBorrow.TRY_NEXT_FLAVOR
    assert q.fungibility.when_can_preempt is WhenCanPreempt.MAY_STOP_SEARCH
    assert loaded.mig == {"vision": {A100: {"1g.10gb": MigQuota("1g.10gb", 7)}}}
    assert tree.ancestors("team") == ("team", "research", "org")
    assert tree.cohorts["research"].weight == 0.5
    assert tree.cohorts["team"].flavors == {A100: FlavorQuota(2)}
    assert tree.cluster_queue("vision-team") == "vision"
    assert tree.local_queues["vision-team"].namespace == "team-a"
    assert tree.priority_classes["high"].value == 1000
    fs = tree.fair_sharing
    assert fs.enabled and fs.strategies == (FairPreemption.LESS_THAN_INITIAL_SHARE,)
    assert fs.usage_half_life_s == 5400


def test_a_folder_of_files_reads_like_one_file(tmp_path: Path) -> None:
    docs = base_docs()
    (tmp_path / "d").mkdir()
    write(tmp_path / "d", docs[:2], "flavors.yaml")
    write(tmp_path / "d", docs[2:], "rest.yml")
    (tmp_path / "d" / "README.md").write_text("not read")
    assert load_tenancy_file(tmp_path / "d") == load_tenancy_file(write(tmp_path, docs))


@pytest.mark.parametrize(("text", "value"), [
    (8, 8), ("8", 8), ("500m", 0.5), ("1k", 1000), ("2Ki", 2048), ("1e3", 1000),
    ("1.5", 1.5), ("250u", 0.00025)])
def test_kubernetes_quantities(text: object, value: float) -> None:
    assert float(parse_quantity("x", "y", text)) == value


# ---------------------------------------------------------------------------------------------
# Every spec field of the bundled CRD schemas is mapped or refused

SCHEMAS: dict[str, Any] = json.loads(
    resources.files("tessera.data").joinpath("kueue", "crd_schemas_v1beta2.json").read_text())

MAPPED = {
    "ClusterQueue": {
        "spec.cohortName", "spec.fairSharing", "spec.fairSharing.weight",
        "spec.flavorFungibility", "spec.flavorFungibility.whenCanBorrow",
        "spec.flavorFungibility.whenCanPreempt", "spec.preemption",
        "spec.preemption.reclaimWithinCohort", "spec.preemption.withinClusterQueue",
        "spec.resourceGroups", "spec.resourceGroups[].coveredResources",
        "spec.resourceGroups[].flavors", "spec.resourceGroups[].flavors[].name",
        "spec.resourceGroups[].flavors[].resources",
        "spec.resourceGroups[].flavors[].resources[].name",
        "spec.resourceGroups[].flavors[].resources[].nominalQuota",
        "spec.resourceGroups[].flavors[].resources[].borrowingLimit",
        "spec.resourceGroups[].flavors[].resources[].lendingLimit"},
    "LocalQueue": {"spec.clusterQueue"},
    "ResourceFlavor": set(),
}
"""Fields read into a typed value (docs/tenancy.md says what each does). Fields accepted only
at Tessera's own behaviour (``queueingStrategy: BestEffortFIFO``, ``stopPolicy: None``, an
empty ``namespaceSelector``, ``nodeLabels`` with ``nvidia.com/gpu.product`` only) count as
refused otherwise, and are in :data:`REFUSED`."""


def _paths(schema: dict[str, Any], prefix: str = "spec") -> list[str]:
    out = []
    for key, sub in schema.get("properties", {}).items():
        out += [f"{prefix}.{key}", *_paths(sub, f"{prefix}.{key}")]
    if "items" in schema:
        out += _paths(schema["items"], f"{prefix}[]")
    return out


@pytest.mark.parametrize("kind", ["ClusterQueue", "LocalQueue", "ResourceFlavor"])
def test_every_spec_field_of_the_crd_is_mapped_or_refused(kind: str) -> None:
    spec = SCHEMAS[kind]["openAPIV3Schema"]["properties"]["spec"]
    paths = _paths(spec)
    assert paths
    unknown = [p for p in paths
               if p not in MAPPED[kind] and refusal_reason(kind, p.replace("[]", "")) is None]
    assert not unknown, f"{kind}: map or refuse (kueue_read.REFUSED): {unknown}"
    stale = [k for k in REFUSED if k.startswith(f"{kind}.")
             and k.split(".", 1)[1] not in {p.replace("[]", "") for p in paths}]
    assert not stale, stale


REFUSALS: list[tuple[str, Any, str]] = [
    ("ClusterQueue", {"admissionChecksStrategy": {"admissionChecks": [{"name": "x"}]}},
     "spec.admissionChecksStrategy"),
    ("ClusterQueue", {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}},
     "spec.admissionScope"),
    ("ClusterQueue", {"concurrentAdmissionPolicy": {"migration": {"mode": "RetainFirstAdmission"}}},
     "spec.concurrentAdmissionPolicy"),
    ("ClusterQueue", {"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {
        "policy": "LowerPriority"}}}, "spec.preemption.borrowWithinCohort.policy"),
    ("ClusterQueue", {"preemption": {"borrowWithinCohort": {"maxPriorityThreshold": 3}}},
     "spec.preemption.borrowWithinCohort.maxPriorityThreshold"),
    ("ClusterQueue", {"flavorFungibility": {"preference": "BorrowingOverPreemption"}},
     "spec.flavorFungibility.preference"),
    ("ClusterQueue", {"namespaceSelector": {"matchLabels": {"team": "a"}}},
     "spec.namespaceSelector"),
    ("ClusterQueue", {"queueingStrategy": "StrictFIFO"}, "spec.queueingStrategy"),
    ("ClusterQueue", {"stopPolicy": "Hold"}, "spec.stopPolicy"),
    ("ClusterQueue", {"fairSharing": {"weight": 1, "extra": 2}}, "spec.fairSharing.extra"),
    ("LocalQueue", {"fairSharing": {"weight": 2}}, "spec.fairSharing"),
    ("LocalQueue", {"stopPolicy": "HoldAndDrain"}, "spec.stopPolicy"),
    ("ResourceFlavor", {"nodeLabels": {"zone": "a"}}, "spec.nodeLabels.zone"),
    ("ResourceFlavor", {"nodeTaints": [{"key": "k", "effect": "NoSchedule"}]},
     "spec.nodeTaints"),
    ("ResourceFlavor", {"tolerations": [{"key": "k"}]}, "spec.tolerations"),
    ("ResourceFlavor", {"topologyName": "rack"}, "spec.topologyName"),
]


@pytest.mark.parametrize(("kind", "spec", "path"), REFUSALS,
                         ids=[f"{k}-{p}" for k, _, p in REFUSALS])
def test_a_field_tessera_cannot_honour_is_refused_with_its_path(
        tmp_path: Path, kind: str, spec: Doc, path: str) -> None:
    docs = base_docs()
    target = {"ClusterQueue": 5, "LocalQueue": 6, "ResourceFlavor": 0}[kind]
    doc = copy.deepcopy(docs[target])
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(doc["spec"].get(key), dict):
            doc["spec"][key] = {**doc["spec"][key], **value}
        else:
            doc["spec"][key] = value
    docs[target] = doc
    name = doc["metadata"]["name"]
    with pytest.raises(SpecError, match=rf"{kind} '{name}': {path}: not supported \("):
        load_tenancy_file(write(tmp_path, docs))


def test_the_refusal_says_the_issue_example(tmp_path: Path) -> None:
    docs = base_docs()
    docs[5]["metadata"]["name"] = "a"
    docs[5]["spec"]["admissionChecks"] = ["prov"]  # the v1beta1 spelling
    docs[6]["spec"]["clusterQueue"] = "a"
    with pytest.raises(SpecError, match=r"ClusterQueue 'a': spec.admissionChecks: not supported"):
        load_tenancy_file(write(tmp_path, docs))


def test_a_resource_other_than_gpus_is_refused(tmp_path: Path) -> None:
    docs = base_docs()
    docs[5]["spec"]["resourceGroups"][0]["coveredResources"].append("cpu")
    with pytest.raises(SpecError, match=r"ClusterQueue 'vision': spec.resourceGroups\[0\]."
                       r"coveredResources\[2\]: not supported \(resource 'cpu'"):
        load_tenancy_file(write(tmp_path, docs))


# ---------------------------------------------------------------------------------------------
# Bad input (issue 32): each refused at load, object and field named


def test_a_cluster_queue_in_a_cohort_that_does_not_exist(tmp_path: Path) -> None:
    docs = base_docs()
    docs[5]["spec"]["cohortName"] = "nowhere"
    with pytest.raises(SpecError, match=r"ClusterQueue 'vision': spec.cohortName: cohort "
                       r"'nowhere' does not exist"):
        load_tenancy_file(write(tmp_path, docs))


def test_a_cycle_of_cohorts(tmp_path: Path) -> None:
    docs = base_docs()
    docs[2]["spec"]["parentName"] = "team"  # org -> team -> research -> org
    with pytest.raises(SpecError, match=r"cycle of cohorts"):
        load_tenancy_file(write(tmp_path, docs))


def test_a_cohort_whose_parent_does_not_exist(tmp_path: Path) -> None:
    docs = base_docs()
    docs[2]["spec"]["parentName"] = "gone"
    with pytest.raises(SpecError, match=r"cohort 'org': parent 'gone' does not exist"):
        load_tenancy_file(write(tmp_path, docs))


def test_quota_for_a_flavor_the_cluster_lacks(tmp_path: Path) -> None:
    p = write(tmp_path, base_docs())
    load_tenancy_file(p, [A100, H100])
    with pytest.raises(SpecError, match=r"queue 'vision': quota for flavor "
                       r"'NVIDIA-H100-80GB-HBM3', which the cluster does not have"):
        load_tenancy_file(p, [A100])


def test_a_flavor_not_defined_as_a_resource_flavor(tmp_path: Path) -> None:
    docs = base_docs()
    docs[5]["spec"]["resourceGroups"][0]["flavors"][1]["name"] = "b200"
    with pytest.raises(SpecError, match=r"flavors\[1\].name: ResourceFlavor 'b200' is not"):
        load_tenancy_file(write(tmp_path, docs))


@pytest.mark.parametrize(("value", "msg"), [
    (-1, "must be >= 0"), ("-2", "must be >= 0"), ("1.5", "must be a whole number of GPUs"),
    ("500m", "must be a whole number of GPUs"), ("many", "not a Kubernetes quantity")])
def test_negative_or_non_integer_gpu_quotas(tmp_path: Path, value: Any, msg: str) -> None:
    docs = base_docs()
    docs[5]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = value
    with pytest.raises(SpecError, match=r"ClusterQueue 'vision': spec.resourceGroups\[0\]."
                       rf"flavors\[0\].resources\[0\].nominalQuota: {msg}"):
        load_tenancy_file(write(tmp_path, docs))


def test_a_local_queue_pointing_nowhere(tmp_path: Path) -> None:
    docs = base_docs()
    docs[6]["spec"]["clusterQueue"] = "gone"
    with pytest.raises(SpecError, match=r"LocalQueue 'vision-team': spec.clusterQueue: "
                       r"ClusterQueue 'gone' does not exist"):
        load_tenancy_file(write(tmp_path, docs))


@pytest.mark.parametrize("target", [3, 5], ids=["cohort", "cluster-queue"])
def test_a_weight_below_zero(tmp_path: Path, target: int) -> None:
    docs = base_docs()
    docs[target]["spec"]["fairSharing"] = {"weight": "-500m"}
    kind = docs[target]["kind"]
    with pytest.raises(SpecError, match=rf"{kind} '\w+': spec.fairSharing.weight: must be >= 0"):
        load_tenancy_file(write(tmp_path, docs))


def test_an_unknown_kind(tmp_path: Path) -> None:
    docs = [*base_docs(), {"apiVersion": API, "kind": "Workload", "metadata": {"name": "w"}}]
    with pytest.raises(SpecError, match=r"kueue.yaml: document 10: kind 'Workload' is not "):
        load_tenancy_file(write(tmp_path, docs))


def test_an_old_api_version(tmp_path: Path) -> None:
    docs = base_docs()
    docs[5]["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    with pytest.raises(SpecError, match=r"ClusterQueue 'vision': apiVersion "
                       r"'kueue.x-k8s.io/v1beta1' is not supported"):
        load_tenancy_file(write(tmp_path, docs))


def test_a_priority_class_needs_a_whole_value(tmp_path: Path) -> None:
    docs = base_docs()
    docs[7]["value"] = "high"
    with pytest.raises(SpecError, match=r"WorkloadPriorityClass 'high': value: must be a whole"):
        load_tenancy_file(write(tmp_path, docs))


def test_an_unknown_gpu_product(tmp_path: Path) -> None:
    docs = base_docs()
    docs[0]["spec"]["nodeLabels"]["nvidia.com/gpu.product"] = "NVIDIA-Z9"
    with pytest.raises(SpecError, match=r"ResourceFlavor 'big': spec.nodeLabels.nvidia.com/"
                       r"gpu.product: unknown GPU flavor 'NVIDIA-Z9'"):
        load_tenancy_file(write(tmp_path, docs))


def test_mig_slices_of_a_profile_the_flavor_lacks(tmp_path: Path) -> None:
    docs = base_docs()
    big = docs[5]["spec"]["resourceGroups"][0]
    big["coveredResources"][1] = "nvidia.com/mig-1g.5gb"  # an A100-40GB profile
    for f in big["flavors"]:
        f["resources"][1]["name"] = "nvidia.com/mig-1g.5gb"
    with pytest.raises(SpecError, match=r"queue 'vision' flavor 'A100-80GB' MIG '1g.5gb': "
                       r"unknown MIG profile"):
        load_tenancy_file(write(tmp_path, docs))


def test_a_local_queue_named_like_another_cluster_queue(tmp_path: Path) -> None:
    docs = base_docs()
    other = cq("other")
    docs.insert(6, other)
    docs.append(lq("other", "vision"))
    with pytest.raises(SpecError, match=r"LocalQueue 'other': metadata.name: 'other' is a "
                       r"ClusterQueue's name"):
        load_tenancy_file(write(tmp_path, docs))
    docs[-1] = lq("other", "other")  # what export writes: a LocalQueue per ClusterQueue
    assert load_tenancy_file(write(tmp_path, docs)).tree.cluster_queue("other") == "other"
