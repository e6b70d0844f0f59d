"""``tessera export kueue`` against Kueue's published v1beta2 CRD schemas and webhook rules.

An exported object reaches Kueue through four gates, and :func:`violations` checks each:

1. **the YAML reader** -- Kubernetes reads manifests with go-yaml, for which a plain ``1e-10``
   is a float and a plain ``y`` a boolean (:class:`KubeLoader` reads the files the same way);
2. **the API server's object-meta rules** -- a custom resource's name is a DNS-1123
   subdomain, a namespaced one has a namespace that is a DNS-1123 label;
3. **the CRD schema** -- the bundled ``tessera/data/kueue/crd_schemas_v1beta2.json`` (Kueue
   v0.19.2), with the Kubernetes extensions that plain JSON Schema ignores: unknown fields are
   pruned, ``x-kubernetes-list-type: map`` keys are unique, and the CEL rules hold;
4. **Kueue's validating webhooks** (``pkg/webhooks`` at v0.19.2) -- non-negative quotas, a
   fair-sharing weight of 0 or above 1n, label-shaped node labels, unique flavors.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
import yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from tessera.cli.live import register
from tessera.errors import SpecError
from tessera.live.kueue import API_VERSION, dump_documents, k8s_name, kueue_weight
from tessera.live.tenancy import CONFIG_NAME, hash_token

runner = CliRunner()
Doc = dict[str, Any]

SCHEMAS: dict[str, Any] = json.loads(
    resources.files("tessera.data").joinpath("kueue", "crd_schemas_v1beta2.json").read_text())


# ---------------------------------------------------------------------------------------------
# 1. Reading YAML as Kubernetes does


class KubeLoader(yaml.SafeLoader):
    """PyYAML's safe loader plus the go-yaml resolutions PyYAML lacks: ``1e3``-style floats
    (no dot needed) and ``y``/``n`` booleans."""

    bool_values: ClassVar[dict[str, bool]] = {**yaml.SafeLoader.bool_values, "y": True,
                                              "n": False}


KubeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"), list("-+.0123456789"))
KubeLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"),
                                 list("yYnN"))


def read_docs(out: Path) -> list[Doc]:
    docs: list[Doc] = []
    for stem in ("resource-flavors", "cluster-queues", "local-queues"):
        docs += yaml.load_all((out / f"{stem}.yaml").read_text(), Loader=KubeLoader)
    return docs


# ---------------------------------------------------------------------------------------------
# 2. Object meta (k8s.io/apimachinery validation)

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def is_label(v: object) -> bool:
    return isinstance(v, str) and len(v) <= 63 and _LABEL.fullmatch(v) is not None


def is_subdomain(v: object) -> bool:
    return isinstance(v, str) and len(v) <= 253 and _SUBDOMAIN.fullmatch(v) is not None


def is_label_key(v: object) -> bool:
    """A qualified name with an optional DNS-subdomain prefix (``nvidia.com/gpu.product``)."""
    if not isinstance(v, str):
        return False
    prefix, _, name = v.rpartition("/")
    return ((not prefix or is_subdomain(prefix)) and len(name) <= 63
            and _QUALIFIED_NAME.fullmatch(name) is not None)


def is_label_value(v: object) -> bool:
    return isinstance(v, str) and len(v) <= 63 and _LABEL_VALUE.fullmatch(v) is not None


def meta_violations(doc: Doc, scope: str) -> list[str]:
    meta = doc.get("metadata", {})
    name, errs = meta.get("name"), []
    if not is_subdomain(name):
        errs.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    if scope == "Namespaced" and not is_label(meta.get("namespace")):
        errs.append(f"metadata.namespace {meta.get('namespace')!r} is not a DNS-1123 label")
    if scope == "Cluster" and "namespace" in meta:
        errs.append("metadata.namespace set on a cluster-scoped object")
    return errs


# ---------------------------------------------------------------------------------------------
# 3. The CRD schema, with Kubernetes' structural extensions

# The CEL rules (x-kubernetes-validations) of the bundled schemas, keyed by their exact text.
# Transition rules (those reading oldSelf) only run on updates; an export creates objects.
CEL: dict[str, Callable[[Any], bool]] = {
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, "
    "rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true":
        lambda s: "cohortName" in s or "resourceGroups" not in s or all(
            "borrowingLimit" not in r for rg in s["resourceGroups"] for f in rg["flavors"]
            for r in f["resources"]),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))":
        lambda rg: all(len(f["resources"]) == len(rg["coveredResources"])
                       for f in rg["flavors"]),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && "
    "self.whenCanPreempt == 'TryNextFlavor')":
        lambda s: "preference" not in s or (s.get("whenCanBorrow") == "TryNextFlavor"
                                            and s.get("whenCanPreempt") == "TryNextFlavor"),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  "
    "self.borrowWithinCohort.policy != 'Never')":
        lambda s: not (s.get("reclaimWithinCohort", "Never") == "Never"
                       and "borrowWithinCohort" in s
                       and s["borrowWithinCohort"].get("policy", "Never") != "Never"),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1":
        lambda s: "topologyName" not in s or len(s.get("nodeLabels", {})) >= 1,
}


def structural_violations(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """What plain JSON Schema does not check: pruning, list-map keys and the CEL rules."""
    errs = []
    for v in schema.get("x-kubernetes-validations", []):
        rule = v["rule"]
        if "oldSelf" in rule:
            continue
        if rule not in CEL:
            errs.append(f"{path}: CEL rule not checked by this test: {rule}")
        elif not CEL[rule](value):
            errs.append(f"{path}: {v['message']}")
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in value.items():
            if key in schema["properties"]:
                errs += structural_violations(sub, schema["properties"][key], f"{path}.{key}")
            elif not isinstance(schema.get("additionalProperties"), dict):
                errs.append(f"{path}.{key}: unknown field (the API server prunes it)")
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, sub in value.items():
            errs += structural_violations(sub, schema["additionalProperties"], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(x.get(k) for k in schema["x-kubernetes-list-map-keys"])
                    for x in value]
            if len(set(keys)) != len(keys):
                errs.append(f"{path}: duplicate list-map keys {keys}")
        for i, sub in enumerate(value):
            errs += structural_violations(sub, schema["items"], f"{path}[{i}]")
    return errs


# ---------------------------------------------------------------------------------------------
# 4. Kueue's webhooks

_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
_SUFFIX = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
           "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
           "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
           **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi",
                                                                   "Ei"))}}


def quantity(v: Any) -> Decimal:
    """A Kubernetes quantity's value, rounded up to 1n as Kubernetes stores it."""
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ValueError(f"{v!r} is not a quantity")
    m = _QUANTITY.fullmatch(str(v))
    if m is None:
        raise ValueError(f"{v!r} is not a quantity")
    number, suffix = m.group(1), m.group(2) or ""
    exact = (Decimal(number + suffix) if suffix[:1] in ("e", "E")
             else Decimal(number) * _SUFFIX[suffix])
    return (exact * 10**9).to_integral_value(ROUND_CEILING) / 10**9


def _quantity_errors(v: Any, where: str) -> list[str]:
    try:
        q = quantity(v)
    except ValueError as e:
        return [f"{where}: {e}"]
    return [f"{where}: must be greater than or equal to 0"] if q < 0 else []


def cluster_queue_webhook(doc: Doc) -> list[str]:
    spec, errs = doc["spec"], []
    resources_seen: set[str] = set()
    flavors_seen: set[str] = set()
    for g, rg in enumerate(spec.get("resourceGroups", [])):
        for r in rg["coveredResources"]:
            if not is_label_key(r) or r in resources_seen:
                errs.append(f"resourceGroups[{g}]: covered resource {r!r} invalid or repeated")
            resources_seen.add(r)
        for f in rg["flavors"]:
            if f["name"] in flavors_seen:
                errs.append(f"resourceGroups[{g}]: flavor {f['name']!r} repeated")
            flavors_seen.add(f["name"])
            for r, covered in zip(f["resources"], rg["coveredResources"], strict=False):
                where = f"flavor {f['name']} resource {r['name']}"
                if r["name"] != covered:
                    errs.append(f"{where}: must match the name in coveredResources")
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if key in r:
                        errs += _quantity_errors(r[key], f"{where}.{key}")
    if "weight" in spec.get("fairSharing", {}):
        w = spec["fairSharing"]["weight"]
        errs += _quantity_errors(w, "fairSharing.weight")
        if not errs and 0 < quantity(w) <= Decimal("1e-9"):
            errs.append(f"fairSharing.weight {w!r}: When not 0, weight must be > 10e-9")
    selector = spec.get("namespaceSelector", {})
    if set(selector) - {"matchLabels", "matchExpressions"}:
        errs.append(f"namespaceSelector {selector!r} is not a label selector")
    if not is_label(doc["metadata"]["name"]):
        errs.append("metadata.name: Kueue cannot copy it into the pods' cluster-queue label")
    return errs


def resource_flavor_webhook(doc: Doc) -> list[str]:
    return [f"nodeLabels: {k!r}: {v!r} is not a valid label"
            for k, v in doc["spec"].get("nodeLabels", {}).items()
            if not is_label_key(k) or not is_label_value(v)]


def local_queue_use(doc: Doc) -> list[str]:
    """No webhook, but jobs name a LocalQueue in the ``kueue.x-k8s.io/queue-name`` label."""
    name = doc["metadata"]["name"]
    return [] if is_label_value(name) else [f"metadata.name {name!r} is not a label value"]


WEBHOOKS: dict[str, Callable[[Doc], list[str]]] = {
    "ClusterQueue": cluster_queue_webhook, "ResourceFlavor": resource_flavor_webhook,
    "LocalQueue": local_queue_use}


def violations(doc: Doc) -> list[str]:
    """Every reason Kubernetes or Kueue v0.19.2 would refuse to create ``doc``."""
    kind = doc.get("kind")
    if doc.get("apiVersion") != API_VERSION or kind not in SCHEMAS:
        return [f"not a Kueue v1beta2 object this test knows: {doc.get('apiVersion')}/{kind}"]
    crd = SCHEMAS[kind]
    schema = crd["openAPIV3Schema"]
    errs = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in Draft202012Validator(schema).iter_errors(doc)]
    errs += meta_violations(doc, crd["scope"])
    errs += structural_violations(doc, schema, kind)
    if not errs:  # the webhooks see only objects that passed the schema
        errs += WEBHOOKS[kind](doc)
    return errs


def reference_violations(docs: list[Doc]) -> list[str]:
    """Names that point nowhere (Kueue would leave the queue inactive)."""
    by_kind: dict[str, set[str]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], set()).add(d["metadata"]["name"])
    errs = [f"LocalQueue {d['metadata']['name']} → missing ClusterQueue {d['spec']['clusterQueue']}"
            for d in docs if d["kind"] == "LocalQueue"
            and d["spec"]["clusterQueue"] not in by_kind.get("ClusterQueue", set())]
    errs += [f"ClusterQueue {d['metadata']['name']} → missing ResourceFlavor {f['name']}"
             for d in docs if d["kind"] == "ClusterQueue"
             for rg in d["spec"]["resourceGroups"] for f in rg["flavors"]
             if f["name"] not in by_kind.get("ResourceFlavor", set())]
    return errs


# ---------------------------------------------------------------------------------------------
# Exporting


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


def write_tenancy(state: Path, queues: list[dict[str, Any]]) -> Path:
    """A state dir whose config holds ``queues`` and an admin token."""
    state.mkdir(parents=True, exist_ok=True)
    cfg = {"queues": queues,
           "tokens": [{"name": "admin", "sha256": hash_token("t"), "queue": None}]}
    (state / CONFIG_NAME).write_text(yaml.safe_dump(cfg))
    return state


def export(app: typer.Typer, tmp_path: Path, queues: list[dict[str, Any]],
           cluster: str = "v100:4,t4:4", namespace: str = "ml") -> tuple[int, str, Path]:
    state = write_tenancy(tmp_path / "state", queues)
    out = tmp_path / "kueue"
    r = runner.invoke(app, ["export", "kueue", "--state", str(state), "--cluster", cluster,
                            "--out", str(out), "--namespace", namespace])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.output, out


def q(name: str, nominal: int = 4, borrow: int | None = None,
      weight: float = 1.0) -> dict[str, Any]:
    """One queue entry of ``tessera-live.yaml``."""
    return {"name": name, "nominal_gpus": nominal, "borrowing_limit_gpus": borrow,
            "weight": weight}


EVERY_FLAVOR = ("k80:4,p100:4,p40:4,v100:4,v100-32gb:4,t4:4,rtx:4,rtx6000:4,a10:4,l4:4,"
                "a100-40gb:4,a100:4,h100:8,h200:8")

SETUPS = [
    pytest.param([q("team-a", 4, 4), q("team-b", 4, 4)], "v100:4,t4:4", "ml",
                 id="two teams borrowing from each other, two flavors"),
    pytest.param([q("research", 16, None, 2.0), q("prod", 12, 0, 0.5),
                  q("batch", 0, 8, 1.25e-3)], "a100:8,v100:16,t4:8", "gpu-tenants",
                 id="fair-sharing weights, unlimited / no / borrow-only limits, three flavors"),
    pytest.param([q("default", 64, None)], EVERY_FLAVOR, "default",
                 id="one queue over every catalog flavor"),
    pytest.param([q("1e3", 2), q("123", 2, 2), q("y", 2, weight=3e-9)], "v100:4,t4:4", "n",
                 id="names and weights a Kubernetes YAML reader could misread"),
    pytest.param([q("q" * 62 + "-x", 4, 2), q("team-a", 4)], "h100:8", "a" * 63,
                 id="a 64-character queue name and a 63-character namespace"),
]


@pytest.mark.parametrize(("queues", "cluster", "namespace"), SETUPS)
def test_every_exported_object_passes_kueue(app: typer.Typer, tmp_path: Path,
                                            queues: list[dict[str, Any]], cluster: str,
                                            namespace: str) -> None:
    code, output, out = export(app, tmp_path, queues, cluster, namespace)
    assert code == 0, output
    docs = read_docs(out)
    assert [d["kind"] for d in docs].count("ClusterQueue") == len(queues)
    assert [d["kind"] for d in docs].count("LocalQueue") == len(queues)
    for d in docs:
        assert violations(d) == [], (d["kind"], d["metadata"])
    assert reference_violations(docs) == []
    by_name = {k8s_name(x["name"]): x for x in queues}
    for cq in (d for d in docs if d["kind"] == "ClusterQueue"):
        src = by_name[cq["metadata"]["name"]]
        quotas = [f["resources"][0] for f in cq["spec"]["resourceGroups"][0]["flavors"]]
        assert sum(r["nominalQuota"] for r in quotas) == src["nominal_gpus"]
        assert quantity(cq["spec"]["fairSharing"]["weight"]) == Decimal(repr(src["weight"]))
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] == "LocalQueue"} == {namespace}


def test_a_64_character_queue_name_loses_its_dangling_dash(app: typer.Typer,
                                                           tmp_path: Path) -> None:
    long = "q" * 62 + "-x"  # cutting to 63 characters ends on the '-'
    code, output, out = export(app, tmp_path, [q(long)])
    assert code == 0, output
    assert f"queue {long!r} is exported as {'q' * 62!r}" in output
    names = {d["metadata"]["name"] for d in read_docs(out) if d["kind"] != "ResourceFlavor"}
    assert names == {"q" * 62}


def test_names_that_differ_after_63_characters_are_an_error_naming_both(
        app: typer.Typer, tmp_path: Path) -> None:
    first, second = "t" * 63 + "a", "t" * 63 + "b"
    code, output, out = export(app, tmp_path, [q(first), q(second)])
    assert code == 2
    assert first in output and second in output and "rename one of them" in output
    assert not out.exists()


@pytest.mark.parametrize(("weight", "why"), [
    (1e-10, "fair-sharing weight 1e-10 rounds to 0n"),
    (1.2e-9, "fair-sharing weight 1.2e-09 rounds to 1n"),
    (1e19, "fair-sharing weight 1e+19 is larger than a Kubernetes"),
    (math.inf, "weight: Input should be a finite number"),  # refused when the config loads
], ids=["1e-10", "1.2e-9", "1e19", "inf"])
def test_a_weight_kueue_cannot_hold_is_an_error(app: typer.Typer, tmp_path: Path, weight: float,
                                                why: str) -> None:
    code, output, out = export(app, tmp_path, [q("team-a", weight=weight)])
    assert code == 2
    assert "queue 'team-a': " in output and why in output, output
    assert not out.exists()


@pytest.mark.parametrize(("weight", "written"), [
    (1.0, 1), (2.0, 2), (1e6, 1_000_000), (0.5, "500m"), (0.1, "100m"), (1.25e-3, "1250u"),
    (2e-9, "2n"), (1 / 3, "333333333n"), (1.5e-9, "2n"), (0.0, 0),
])
def test_weights_are_canonical_quantities(weight: float, written: int | str) -> None:
    assert kueue_weight(weight) == written
    text = dump_documents([{"weight": kueue_weight(weight)}])
    assert yaml.load(text, Loader=KubeLoader) == {"weight": written}


@pytest.mark.parametrize("weight", [-1.0, math.nan, math.inf, 1e-10, 1.2e-9, 2.0**63])
def test_kueue_weight_refuses_what_kueue_refuses(weight: float) -> None:
    with pytest.raises(SpecError, match="fair-sharing weight"):
        kueue_weight(weight)


@pytest.mark.parametrize(("namespace", "hint"), [
    ("Team_A", "did you mean 'team-a'?"), ("-ml", "did you mean 'ml'?"),
    ("ml.prod", "did you mean 'ml-prod'?"), ("a" * 64, "did you mean"), ("", "namespace ''"),
], ids=["upper case and underscore", "leading dash", "dot", "64 characters", "empty"])
def test_an_invalid_namespace_is_a_clear_error(app: typer.Typer, tmp_path: Path, namespace: str,
                                               hint: str) -> None:
    code, output, out = export(app, tmp_path, [q("team-a")], namespace=namespace)
    assert code == 2
    assert "is not a valid Kubernetes namespace" in output and hint in output
    assert not out.exists()


def test_an_unwritable_out_dir_is_a_clear_error(app: typer.Typer, tmp_path: Path) -> None:
    state = write_tenancy(tmp_path / "state", [q("team-a")])
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = runner.invoke(app, ["export", "kueue", "--state", str(state), "--cluster", "v100:4",
                            "--out", str(blocker)])
    assert r.exit_code == 2 and "cannot write the manifests" in r.output


def test_strings_survive_a_kubernetes_yaml_reader() -> None:
    doc = {"a": "1e3", "b": "y", "c": "500m", "d": 2, "e": "team-a", "f": ".5", "g": "Off"}
    assert yaml.load(dump_documents([doc]), Loader=KubeLoader) == doc
    # PyYAML alone follows YAML 1.1, where these stay plain and come back as a float and a bool:
    assert yaml.load(yaml.safe_dump({"a": "1e3", "b": "y"}), Loader=KubeLoader) == {
        "a": 1000.0, "b": True}


# ---------------------------------------------------------------------------------------------
# The checker itself must refuse what Kueue refuses, or the tests above prove nothing.


def _valid(app: typer.Typer, tmp_path: Path) -> dict[str, Doc]:
    code, output, out = export(app, tmp_path, [q("team-a", 4, 4, 0.5)])
    assert code == 0, output
    return {d["kind"]: d for d in read_docs(out)}


MUTATIONS: list[Any] = [
    pytest.param("ClusterQueue", lambda d: d["spec"]["fairSharing"].update(weight=1e-10),
                 "is not valid under any of the given schemas", id="weight as a YAML float"),
    pytest.param("ClusterQueue", lambda d: d["spec"]["fairSharing"].update(weight="1e-10"),
                 "weight must be > 10e-9", id="weight of 1e-10 as a string"),
    pytest.param("ClusterQueue", lambda d: d["metadata"].update(name="q" * 62 + "-"),
                 "not a DNS-1123 subdomain", id="name ending in a dash"),
    pytest.param("ClusterQueue", lambda d: d["metadata"].update(name="q" * 64),
                 "cluster-queue label", id="64-character ClusterQueue name"),
    pytest.param("LocalQueue", lambda d: d["metadata"].update(namespace="Team_A"),
                 "not a DNS-1123 label", id="namespace Team_A"),
    pytest.param("LocalQueue", lambda d: d["metadata"].update(name="l" * 64),
                 "not a label value", id="64-character LocalQueue name"),
    pytest.param("ClusterQueue", lambda d: d["spec"].update(cohort="tessera"),
                 "unknown field", id="v1beta1's cohort field"),
    pytest.param("ClusterQueue", lambda d: d["spec"].pop("cohortName"),
                 "borrowingLimit must be nil when cohort is empty", id="borrowing without cohort"),
    pytest.param("ClusterQueue", lambda d: d["spec"]["resourceGroups"][0]["flavors"][0][
                     "resources"][0].update(nominalQuota=-1),
                 "greater than or equal to 0", id="negative quota"),
    pytest.param("ClusterQueue", lambda d: d["spec"]["resourceGroups"][0]["flavors"].append(
                     d["spec"]["resourceGroups"][0]["flavors"][0]),
                 "duplicate list-map keys", id="repeated flavor"),
    pytest.param("ResourceFlavor", lambda d: d["spec"]["nodeLabels"].update(
                     {"nvidia.com/gpu.product": "Tesla V100"}),
                 "is not a valid label", id="node label value with a space"),
    pytest.param("ResourceFlavor", lambda d: d["spec"].update(topologyName="tas", nodeLabels={}),
                 "at least one nodeLabel is required", id="topology without node labels"),
]


@pytest.mark.parametrize(("kind", "mutate", "expected"), MUTATIONS)
def test_the_checker_refuses_what_kueue_refuses(app: typer.Typer, tmp_path: Path, kind: str,
                                                mutate: Callable[[Doc], object],
                                                expected: str) -> None:
    doc = _valid(app, tmp_path)[kind]
    assert violations(doc) == []
    mutate(doc)
    errs = violations(doc)
    assert any(expected in e for e in errs), errs
