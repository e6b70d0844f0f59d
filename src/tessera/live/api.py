"""The HTTP API (FastAPI) and the dashboard page.

Every ``/api`` route needs ``Authorization: Bearer <token>``. A tenant token sees only its own
queue's jobs: another tenant's job answers **404**, exactly like a job that does not exist, so
ids cannot be probed. Errors are JSON ``{"detail": "..."}`` with one clear sentence:

=====  =========================================================================
 400   the body is not valid JSON/YAML
 401   missing or unknown token
 403   a tenant submitting to a queue that is not its own
 404   no such job (or not yours)
 409   cancelling a job that already finished; logs of a rank that does not exist
 422   the request fails validation, names an unknown flavor or queue, or can never run
=====  =========================================================================
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tessera.errors import SpecError
from tessera.live.explain import explain
from tessera.live.service import Forbidden
from tessera.live.spec import validate_request
from tessera.live.store import HOLDING, JobRecord
from tessera.live.tenancy import Principal
from tessera.live.view import queue_usage

if TYPE_CHECKING:
    from tessera.live.service import LiveService

_bearer = HTTPBearer(auto_error=False)


def job_json(rec: JobRecord, placement: str | None = None) -> dict[str, Any]:
    """The public view of a job."""
    s = rec.job.spec
    return {
        "job_id": rec.job_id, "name": rec.job.name, "queue": rec.queue, "state": rec.state.value,
        "final": rec.final, "gpus": s.num_gpus, "flavors": [f.short for f in s.flavors],
        "priority": s.priority_weight, "max_retries": s.max_retries, "attempts": rec.attempts,
        "runs": rec.runs, "command": list(rec.job.argv), "model": rec.job.model,
        "job_type": s.job_type, "requires_locality": s.requires_locality,
        "submitted_s": s.submit_time_s, "started_s": rec.first_start_s,
        "finished_s": rec.finish_s, "reason": rec.reason, "exit_code": rec.exit_code,
        "placement": placement,
    }


def create_app(svc: LiveService) -> FastAPI:
    """Build the app around a started :class:`~tessera.live.service.LiveService`."""
    app = FastAPI(title="Tessera live scheduler", version="1")

    def principal(cred: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Principal:
        who = svc.tenancy.authenticate(cred.credentials if cred else None)
        if who is None:
            detail = "missing bearer token" if cred is None else "unknown token"
            raise HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})
        return who

    def visible(job_id: str, who: Principal) -> JobRecord:
        rec = svc.store.get(job_id)
        if rec is None or not who.may_see(rec.queue):
            raise HTTPException(404, f"no job {job_id!r}")
        return rec

    def placements() -> dict[str, str]:
        return {a.job_id: a.placement.describe() for a in svc.store.allocations(HOLDING)}

    @app.exception_handler(SpecError)
    async def _spec_error(_req: Request, e: SpecError) -> JSONResponse:
        code = 403 if isinstance(e, Forbidden) else 422
        return JSONResponse({"detail": str(e)}, status_code=code)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "rounds": svc.rounds, "executor": svc.executor.name}

    @app.post("/api/jobs", status_code=201)
    async def submit(request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
        body = (await request.body()).decode("utf-8", errors="replace")
        ctype = request.headers.get("content-type", "application/json")
        try:
            raw = yaml.safe_load(body) if "yaml" in ctype else json.loads(body)
        except (json.JSONDecodeError, yaml.YAMLError) as e:
            kind = "YAML" if "yaml" in ctype else "JSON"
            raise HTTPException(400, f"request body is not valid {kind}: {e}") from None
        rec = svc.submit(validate_request(raw), who)
        return job_json(rec)

    @app.get("/api/jobs")
    def list_jobs(state: str | None = None, limit: int | None = None,
                  who: Principal = Depends(principal)) -> dict[str, Any]:
        recs = svc.store.jobs(queue=who.queue, limit=limit)
        if state:
            recs = [r for r in recs if r.state.value == state]
        where = placements()
        return {"jobs": [job_json(r, where.get(r.job_id)) for r in recs]}

    @app.get("/api/jobs/{job_id}")
    def get_job(job_id: str, who: Principal = Depends(principal)) -> dict[str, Any]:
        rec = visible(job_id, who)
        out = job_json(rec, placements().get(job_id))
        out["events"] = [{"ts_s": e.ts_s, "kind": e.kind, "from": e.from_state,
                          "to": e.to_state, "detail": e.detail}
                         for e in svc.store.events(job_id=job_id)]
        return out

    @app.post("/api/jobs/{job_id}/cancel")
    @app.delete("/api/jobs/{job_id}")
    def cancel(job_id: str, who: Principal = Depends(principal)) -> dict[str, Any]:
        visible(job_id, who)
        try:
            old = svc.cancel(job_id, who)
        except ValueError as e:
            raise HTTPException(409, str(e)) from None
        rec = svc.store.get(job_id)
        assert rec is not None
        return {**job_json(rec), "was": old.value}

    @app.get("/api/jobs/{job_id}/explain")
    def explain_job(job_id: str, who: Principal = Depends(principal)) -> dict[str, Any]:
        return explain(svc, visible(job_id, who))

    @app.get("/api/queues")
    def queues(_who: Principal = Depends(principal)) -> dict[str, Any]:
        active = svc.store.jobs(active_only=True)
        used = queue_usage(svc.store.allocations(HOLDING), {r.job_id: r.queue for r in active})
        out = []
        for q in svc.tenancy.quotas.values():
            mine = [r for r in active if r.queue == q.name]
            out.append({"name": q.name, "nominal_gpus": q.nominal_gpus,
                        "borrowing_limit_gpus": q.borrowing_limit_gpus, "weight": q.weight,
                        "used_gpus": used.get(q.name, 0),
                        "pending": sum(r.state.value == "pending" for r in mine),
                        "running": sum(r.state.value in ("admitted", "running") for r in mine)})
        return {"queues": out}

    @app.get("/api/cluster")
    def cluster(_who: Principal = Depends(principal)) -> dict[str, Any]:
        used_by_node: dict[str, int] = {}
        for a in svc.store.allocations(HOLDING):
            for nid, c in a.placement.gpus_by_node:
                used_by_node[nid] = used_by_node.get(nid, 0) + c
        flavors: dict[str, dict[str, int]] = {}
        nodes: list[dict[str, Any]] = []
        for n in svc.cluster.nodes:
            f = flavors.setdefault(n.flavor.short, {"total_gpus": 0, "used_gpus": 0, "nodes": 0})
            f["total_gpus"] += n.gpus
            f["used_gpus"] += used_by_node.get(n.node_id, 0)
            f["nodes"] += 1
            nodes.append({"node_id": n.node_id, "flavor": n.flavor.short, "gpus": n.gpus,
                          "used_gpus": used_by_node.get(n.node_id, 0), "rack": n.rack})
        return {"name": svc.cluster.name, "policy": svc.policy.display_name,
                "executor": svc.executor.name, "counts": svc.store.count_jobs(),
                "flavors": [{"flavor": k, **v} for k, v in flavors.items()], "nodes": nodes}

    add_log_route(app, svc, principal, visible)

    @app.get("/", response_class=HTMLResponse)
    @app.get("/dashboard", response_class=HTMLResponse)
    def dashboard() -> str:
        return resources.files("tessera.web").joinpath("dashboard.html").read_text()

    return app


# -- rank output (``tessera logs``) -----------------------------------------------------------

LOG_LIMIT_BYTES = 65536


def add_log_route(app: FastAPI, svc: LiveService, principal: Any, visible: Any) -> None:
    """``GET /api/jobs/{id}/logs?rank=&run=&offset=``: a piece of one rank's output.

    The executor reads it where the rank ran (the local run directory, or the rank's Ray
    actor on its own node), so no shared filesystem is needed. Visible to the job's own
    tenant and the admin only (404 otherwise, like every job route). ``run`` defaults to the
    job's latest launched run; the answer's ``next_offset`` continues the read (``--follow``).
    """

    @app.get("/api/jobs/{job_id}/logs")
    def job_logs(job_id: str, rank: int = 0, run: int | None = None, offset: int = 0,
                 limit: int = LOG_LIMIT_BYTES,
                 who: Principal = Depends(principal)) -> dict[str, Any]:
        rec = visible(job_id, who)
        runs = [run] if run is not None else list(range(rec.runs, 0, -1))
        for r in runs:
            a = svc.store.allocation(job_id, r)
            if a is None or (a.started_s is None and a.status != "running"):
                continue
            if not 0 <= rank < a.placement.num_gpus:
                raise HTTPException(409, f"run {r} of {job_id} has ranks 0..."
                                         f"{a.placement.num_gpus - 1}, not {rank}")
            chunk = svc.executor.read_log(job_id, r, rank, max(offset, 0),
                                          min(max(limit, 1), LOG_LIMIT_BYTES))
            return {"job_id": job_id, "run": r, "rank": rank, "ranks": a.placement.num_gpus,
                    "running": a.status in ("running", "stopping"), "final": rec.final,
                    "text": chunk.text if chunk else "",
                    "next_offset": chunk.next_offset if chunk else offset,
                    "size_bytes": chunk.size_bytes if chunk else 0,
                    "skipped_bytes": chunk.skipped_bytes if chunk else 0}
        return {"job_id": job_id, "run": None, "rank": rank, "ranks": 0, "running": False,
                "final": rec.final, "text": "", "next_offset": 0, "size_bytes": 0,
                "skipped_bytes": 0}
