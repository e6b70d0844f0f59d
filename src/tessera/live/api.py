"""The HTTP API (FastAPI) and the dashboard page.

Every ``/api`` route needs ``Authorization: Bearer <token>``. A tenant token sees only its own
queue's jobs: another tenant's job answers **404**, exactly like a job that does not exist, so
ids cannot be probed. What else each caller sees is in :mod:`tessera.live.visibility`. The
schema pages (``/docs``, ``/redoc``, ``/openapi.json``) exist only with ``tessera serve
--api-docs``; they describe the API, which is public, and hold no data.

Every error is JSON ``{"detail": "..."}`` with one clear sentence and a 4xx status:

=====  =========================================================================
 400   the body is not valid JSON/YAML, or nests too deeply
 401   missing or unknown token
 403   a tenant submitting to a queue that is not its own
 404   no such job (or not yours), no such page
 405   a method the path does not take
 409   cancelling a job that already finished; logs of a rank that does not exist
 413   the body is larger than ``limits.body_bytes`` (a YAML body: ``limits.yaml_bytes``)
 422   the request fails validation, exceeds a limit, names an unknown flavor or queue, a
       checkpoint dir the service owns, or can never run; a query parameter out of range
=====  =========================================================================

A 500 means a bug: it is answered as JSON too, and the service log has the traceback.
"""

from __future__ import annotations

import inspect
import logging
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from tessera.errors import SpecError
from tessera.live.explain import explain
from tessera.live.intake import (
    INLINE_BODY_BYTES,
    FastSubmit,
    GroupCommit,
    admit_body,
    admits_quickly,
    parse_submission,
)
from tessera.live.limits import BodyLimit
from tessera.live.service import Forbidden
from tessera.live.store import HOLDING, JobRecord
from tessera.live.tenancy import Principal
from tessera.live.visibility import cluster_json, job_json, log_retention_json, queues_json

if TYPE_CHECKING:
    from tessera.live.service import LiveService

log = logging.getLogger("tessera.live.api")
_bearer = HTTPBearer(auto_error=False)
#: FastAPI's built-in OpenTelemetry hooks, off where FastAPI has them: the service exports no
#: telemetry, and asking the global providers costs a check on every request.
_NO_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


def create_app(svc: LiveService, api_docs: bool = False) -> FastAPI:
    """Build the app around a started :class:`~tessera.live.service.LiveService`.

    Args:
        svc: the service; its tenancy config gives the API's limits.
        api_docs: serve ``/docs``, ``/redoc`` and ``/openapi.json`` (off by default).
    """
    limits = svc.tenancy.limits
    docs = {"docs_url": "/docs", "redoc_url": "/redoc", "openapi_url": "/openapi.json"}
    app = FastAPI(title="Tessera live scheduler", version="1",
                  **(docs if api_docs else dict.fromkeys(docs)), **_NO_TELEMETRY)
    commit = GroupCommit(svc)
    app.add_middleware(FastSubmit, svc=svc, commit=commit)  # inside BodyLimit: sizes checked
    app.add_middleware(BodyLimit, max_bytes=limits.body_bytes)

    async def principal(cred: HTTPAuthorizationCredentials | None = Depends(_bearer)
                        ) -> Principal:
        # async: a hash and a constant-time compare, too cheap to be worth a worker thread
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

    @app.exception_handler(RequestValidationError)
    async def _bad_params(_req: Request, e: RequestValidationError) -> JSONResponse:
        lines = [f"{'.'.join(str(x)[:64] for x in err['loc'])}: {err['msg']}"
                 for err in e.errors()[:10]]
        return JSONResponse({"detail": "; ".join(lines)}, status_code=422)

    @app.exception_handler(Exception)
    async def _bug(req: Request, e: Exception) -> JSONResponse:
        log.error("%s %s failed", req.method, req.url.path, exc_info=e)
        return JSONResponse({"detail": f"internal error ({type(e).__name__}); the service "
                             "log has the details"}, status_code=500)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "rounds": svc.rounds, "executor": svc.executor.name}

    @app.post("/api/jobs", status_code=201, response_model=None,
              openapi_extra={"security": [{"HTTPBearer": []}]})
    async def submit(request: Request) -> JSONResponse:
        # Ordinary submissions are answered by FastSubmit before they get here; this route
        # takes the rest (YAML, large bodies, refusals) and gives each its status and message.
        who = await principal(await _bearer(request))
        ctype = request.headers.get("content-type", "application/json")
        body = await request.body()
        # A small JSON body is admitted right here: well under a millisecond, and a hop to a
        # worker thread would cost more than it saves. YAML and large bodies take long enough
        # to parse that they go to a worker thread.
        if len(body) <= INLINE_BODY_BYTES and "yaml" not in ctype:
            req = parse_submission(svc, body, ctype)
            new = (svc.admit(req, who) if admits_quickly(req)
                   else await run_in_threadpool(svc.admit, req, who))
        else:
            new = await run_in_threadpool(admit_body, svc, body, ctype, who)
        # The job view is plain JSON values: answered as is, without FastAPI's encoder pass.
        return JSONResponse(job_json(await commit.store(new)), status_code=201)

    @app.get("/api/jobs")
    def list_jobs(state: str | None = Query(None, max_length=32),
                  limit: int | None = Query(None, ge=1, le=limits.list_limit_max),
                  who: Principal = Depends(principal)) -> dict[str, Any]:
        recs = svc.store.jobs(queue=who.queue, limit=limit or limits.list_limit_max)
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
        out.update(log_retention_json(rec, svc.tenancy.logs.retention_s))
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
    def queues(who: Principal = Depends(principal)) -> dict[str, Any]:
        return queues_json(svc, who)

    @app.get("/api/cluster")
    def cluster(who: Principal = Depends(principal)) -> dict[str, Any]:
        return cluster_json(svc, who)

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
