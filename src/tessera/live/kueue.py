"""Export Tessera's flavors and queues as Kueue manifests (``kueue.x-k8s.io/v1beta2``).

Teams moving to Kubernetes keep the same tenancy:

* each GPU flavor of the cluster → a **ResourceFlavor** whose ``nodeLabels`` select nodes by
  ``nvidia.com/gpu.product`` (the canonical flavor name is that label's value);
* each queue → a **ClusterQueue** in one cohort (``tessera``), covering ``nvidia.com/gpu``,
  with the cluster's flavors in order, and a **LocalQueue** of the same name pointing at it.

Tessera's quotas count GPUs of any flavor; Kueue's are per flavor. The export splits a queue's
nominal quota (and borrowing limit) across flavors in proportion to each flavor's share of the
cluster (largest remainders, so the parts add up exactly). An unlimited borrowing limit is left
out, which Kueue reads as unlimited.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tessera.model.cluster import ClusterSpec, load_cluster
from tessera.sched.snapshot import QueueQuota

API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU_RESOURCE = "nvidia.com/gpu"
COHORT = "tessera"


def k8s_name(text: str) -> str:
    """A DNS-1123 label: lower case, alphanumerics and '-'."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63]


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


def manifests(cluster: ClusterSpec, quotas: list[QueueQuota],
              namespace: str = "default") -> dict[str, list[dict[str, Any]]]:
    """The three manifest lists, keyed by file stem."""
    by_flavor = cluster.gpus_by_flavor()
    flavors = list(by_flavor)
    counts = [by_flavor[f] for f in flavors]
    rf = [{"apiVersion": API_VERSION, "kind": "ResourceFlavor",
           "metadata": {"name": k8s_name(f.short)},
           "spec": {"nodeLabels": {"nvidia.com/gpu.product": f.name}}} for f in flavors]
    cqs, lqs = [], []
    for q in quotas:
        nominal = split_proportionally(q.nominal_gpus, counts)
        borrow = (None if q.borrowing_limit_gpus is None
                  else split_proportionally(q.borrowing_limit_gpus, counts))
        entries = []
        for i, f in enumerate(flavors):
            res: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": nominal[i]}
            if borrow is not None:
                res["borrowingLimit"] = borrow[i]
            entries.append({"name": k8s_name(f.short), "resources": [res]})
        cqs.append({"apiVersion": API_VERSION, "kind": "ClusterQueue",
                    "metadata": {"name": k8s_name(q.name)},
                    "spec": {"cohortName": COHORT, "namespaceSelector": {},
                             "queueingStrategy": "BestEffortFIFO",
                             "fairSharing": {"weight": str(q.weight)},
                             "resourceGroups": [{"coveredResources": [GPU_RESOURCE],
                                                 "flavors": entries}]}})
        lqs.append({"apiVersion": API_VERSION, "kind": "LocalQueue",
                    "metadata": {"name": k8s_name(q.name), "namespace": namespace},
                    "spec": {"clusterQueue": k8s_name(q.name)}})
    return {"resource-flavors": rf, "cluster-queues": cqs, "local-queues": lqs}


def write_manifests(out_dir: Path, docs: dict[str, list[dict[str, Any]]]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, items in docs.items():
        p = out_dir / f"{stem}.yaml"
        p.write_text(yaml.safe_dump_all(items, sort_keys=False))
        paths.append(p)
    return paths


def export_from_state(state_dir: Path, out_dir: Path, cluster_text: str | None,
                      gpus_per_server: int, namespace: str) -> list[Path]:
    """Export the queues of a service's state dir and its (or the given) cluster."""
    from tessera.live.server import DEFAULT_CLUSTER
    from tessera.live.store import Store
    from tessera.live.tenancy import load_tenancy

    tenancy = load_tenancy(state_dir)
    if cluster_text is None and (state_dir / "state.db").exists():
        store = Store(state_dir / "state.db")
        cluster_text = store.meta("cluster")
        gpus_per_server = int(store.meta("gpus_per_server") or gpus_per_server)
        store.close()
    cluster = load_cluster(cluster_text or DEFAULT_CLUSTER, gpus_per_server)
    return write_manifests(out_dir, manifests(cluster, list(tenancy.quotas.values()), namespace))
