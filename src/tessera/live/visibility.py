"""What each caller may read: the JSON views of jobs, queues and the cluster.

The rule (``docs/security.md`` has the whole table):

* a **job** is visible to the admin and to the tenant of its queue; to anyone else it does
  not exist (404, the same answer as an unknown id, so ids cannot be probed). No view ever
  carries a job's ``env`` values, not even to its owner: they stay in the private store and
  reach only the job;
* **queues**: a tenant sees only its own queue; the admin sees all;
* **the cluster**: a tenant sees its capacity (flavors, nodes, GPUs) and what *its own queue*
  holds on each flavor (``queue_used_gpus``) and counts of its own queue's jobs
  (``queue_counts``); the admin sees what every run holds (``used_gpus`` per flavor and per
  node) and job counts across all queues (``counts``).

``tenants_see_all: true`` in ``tessera-live.yaml`` gives tenants the admin's queue and cluster
views (for a trusting team); jobs stay private to their queue either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tessera.live.drain_quota import queue_of_holding
from tessera.live.sharing import counted
from tessera.live.store import HOLDING, Allocation, JobRecord, Store
from tessera.live.tenancy import Principal
from tessera.live.view import cpu_only_usage, queue_usage
from tessera.live.where import describe, placement_json

if TYPE_CHECKING:
    from tessera.live.service import LiveService


def job_json(rec: JobRecord, where: Allocation | None = None) -> dict[str, Any]:
    """The public view of one job (no ``env``: see the module docstring): its summary and its
    ``command``."""
    out = job_summary_json(rec, where)
    out["command"] = list(rec.job.argv)
    return out


def job_summary_json(rec: JobRecord, where: Allocation | None = None) -> dict[str, Any]:
    """A job as listings show it (``GET /api/jobs``, the dashboard's poll): :func:`job_json`
    without ``command``, whose 8 KiB per job made a poll of a few hundred jobs megabytes; the
    command is one ``GET /api/jobs/<id>`` away.

    ``where``: the job's latest run (:func:`latest_runs`). ``placement`` is the text of the
    GPUs it holds now (``None`` when it holds none, as before); ``last_placement`` keeps the
    latest run's placement after the run ended, with its parts as numbers
    (:func:`~tessera.live.where.placement_json`).
    """
    s = rec.job.spec
    held = where is not None and where.status != "done"
    return {
        "job_id": rec.job_id, "name": rec.job.name, "queue": rec.queue, "state": rec.state.value,
        "final": rec.final, "gpus": s.num_gpus, "flavors": [f.short for f in s.flavors],
        "priority": s.priority_weight, "max_retries": s.max_retries, "attempts": rec.attempts,
        "runs": rec.runs, "model": rec.job.model,
        "job_type": s.job_type, "requires_locality": s.requires_locality,
        "submitted_s": s.submit_time_s, "started_s": rec.first_start_s,
        "finished_s": rec.finish_s, "reason": rec.reason, "exit_code": rec.exit_code,
        "placement": describe(where.placement) if held and where is not None else None,
        "last_placement": (placement_json(where.placement, where.run, where.status)
                           if where is not None else None),
        "global_batch": rec.job.global_batch,
        "elastic": _elastic_json(rec),
    }


def latest_runs(store: Store, recs: list[JobRecord]) -> dict[str, Allocation]:
    """Each job's latest run that holds GPUs (one read for all), else its latest run's
    allocation (one keyed read per job that holds none): where the job runs or last ran."""
    out = {a.job_id: a for a in store.allocations(HOLDING)}
    for rec in recs:
        if rec.job_id not in out and rec.runs > 0:
            a = store.allocation(rec.job_id, rec.runs)
            if a is not None:
                out[rec.job_id] = a
    return {r.job_id: out[r.job_id] for r in recs if r.job_id in out}


def log_retention_json(rec: JobRecord, retention_s: float) -> dict[str, Any]:
    """How long the job's run files (logs, records) are kept: ``log_retention_s`` after each
    run ends, and ``logs_removed_s``, when the last run's are removed (``None`` until the job
    is final; earlier runs' go earlier)."""
    removed = rec.finish_s + retention_s if rec.final and rec.finish_s is not None else None
    return {"log_retention_s": retention_s, "logs_removed_s": removed}


def _elastic_json(rec: JobRecord) -> dict[str, Any] | None:
    """An elastic job's ranges (``None`` for a rigid job)."""
    e = rec.job.elastic
    if e is None:
        return None
    return {"min_gpus": e.min_gpus, "max_gpus": e.max_gpus,
            "initial_batch": e.initial_batch_samples, "max_batch": e.max_batch_samples,
            "efficiency_model": e.efficiency_model}


def queues_json(svc: LiveService, who: Principal) -> dict[str, Any]:
    """``/api/queues``: quota, GPUs held and job counts of the queues ``who`` may see; the
    ``cpus``/``memory`` quota (``null``: none) and what the queue's CPU-only jobs hold."""
    active = svc.store.jobs(active_only=True)
    holding = svc.store.allocations(HOLDING)
    queue_of = queue_of_holding(svc.store, holding, active)  # (a cancelled job's draining run)
    used = queue_usage(holding, queue_of)
    host = cpu_only_usage(holding, queue_of)
    everyone = svc.tenancy.sees_all(who)
    out = []
    for q in svc.tenancy.quotas.values():
        if not everyone and q.name != who.queue:
            continue
        mine = [r for r in active if r.queue == q.name]
        out.append({"name": q.name, "nominal_gpus": q.nominal_gpus,
                    "borrowing_limit_gpus": q.borrowing_limit_gpus, "weight": q.weight,
                    "used_gpus": used.get(q.name, 0),
                    "nominal_cpus": q.nominal_cpus, "nominal_memory_gib": q.nominal_mem_gib,
                    "used_cpus": host.get(q.name, (0.0, 0.0))[0],
                    "used_memory_gib": host.get(q.name, (0.0, 0.0))[1],
                    "pending": sum(r.state.value == "pending" for r in mine),
                    "running": sum(r.state.value in ("admitted", "running") for r in mine)})
    return {"queues": out}


def cluster_json(svc: LiveService, who: Principal) -> dict[str, Any]:
    """``/api/cluster``: capacity for everyone; whose GPUs are used depends on ``who``."""
    everyone = svc.tenancy.sees_all(who)
    holding = svc.store.allocations(HOLDING)
    if not everyone:
        own = {r.job_id for r in svc.store.jobs(active_only=True, queue=who.queue)}
        holding = [a for a in holding if a.job_id in own]
    used_by_node: dict[str, int] = {}
    used_by_flavor: dict[str, int] = {}
    for a in counted(holding):  # a GPU set two runs share is used once
        for node_id, count, flavor in a.placement.parts():
            used_by_node[node_id] = used_by_node.get(node_id, 0) + count
            used_by_flavor[flavor.short] = used_by_flavor.get(flavor.short, 0) + count
    used_key = "used_gpus" if everyone else "queue_used_gpus"
    flavors: dict[str, dict[str, int]] = {}
    nodes: list[dict[str, Any]] = []
    for n in svc.cluster.nodes:
        f = flavors.setdefault(n.flavor.short, {"total_gpus": 0, "nodes": 0})
        f["total_gpus"] += n.gpus
        f["nodes"] += 1
        node: dict[str, Any] = {"node_id": n.node_id, "flavor": n.flavor.short, "gpus": n.gpus,
                                "rack": n.rack}
        if everyone:
            node["used_gpus"] = used_by_node.get(n.node_id, 0)
        nodes.append(node)
    out: dict[str, Any] = {
        "name": svc.cluster.name, "policy": svc.policy.display_name,
        "executor": svc.executor.name, "view": "cluster" if everyone else "queue",
        "flavors": [{"flavor": k, **v, used_key: used_by_flavor.get(k, 0)}
                    for k, v in flavors.items()],
        "nodes": nodes}
    if everyone:
        out["counts"] = svc.store.count_jobs()
    else:
        out["queue"] = who.queue
        out["queue_counts"] = svc.store.count_jobs(queue=who.queue)
    return out
