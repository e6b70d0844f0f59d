"""The HTTP API (FastAPI) and the dashboard page.

Every ``/api`` route needs ``Authorization: Bearer <token>``. A tenant token sees only its own
queue's jobs: another tenant's job answers **404**, exactly like a job that does not exist, so
ids cannot be probed. What else each caller sees is in :mod:`tessera.live.visibility`. The
schema pages (``/docs``, ``/redoc``, ``/openapi.json``) exist only with ``tessera serve
--api-docs``; they describe the API, which is public, and hold no data.

Every error is JSON ``{"detail": "..."}`` with one clear sentence and a 4xx status:

=====  =========================================================================
 400   the body is not valid JSON/YAML, or nests too deeply; a malformed ``Idempotency-Key``
 401   missing or unknown token
 403   a tenant submitting to a queue that is not its own; a tenant reading ``/metrics``
 404   no such job (or not yours), no such page
 405   a method the path does not take
 409   cancelling a job that already finished; logs of a rank that does not exist
 413   the body is larger than ``limits.body_bytes`` (a YAML body: ``limits.yaml_bytes``)
 422   the request fails validation, exceeds a limit, names an unknown flavor or queue, a
       checkpoint dir the service owns, or can never run; a query parameter out of range
       (every integer parameter has bounds, checked before it reaches the store); an
       ``Idempotency-Key`` already used for a different request
 429   a submission over one of its queue's caps (``max_queued_jobs``,
       ``max_stored_jobs``, ``max_stored_bytes``: :mod:`tessera.live.totals`); the
       detail names the cap
 503   the job store failed (damaged, deleted, unwritable: every write from then on, and a
       read that touches a damaged part; ``/healthz`` says ``"store": "failed"``), or it
       could not answer just now (busy, disk full: try again)
=====  =========================================================================

``GET /api/jobs`` answers a page of lean job summaries (no ``command``, never ``env``; one
job's ``GET /api/jobs/<id>`` has its command; ``?active=true``: unfinished jobs only, as the
dashboard polls them): the newest ``?limit=`` jobs (default
``limits.list_page_jobs``, 500), oldest first, and ``next_before``, the cursor of the page of
older jobs (``?before=<next_before>``; ``null`` on the last page).

A 500 means a bug: it is answered as JSON too, and the service log has the traceback.

``POST /api/jobs`` takes an ``Idempotency-Key`` header (:mod:`tessera.live.idempotency`): the
same key from the same caller answers the job it first stored (``200``, ``"replayed": true``).
Every answer carries the security headers of :mod:`tessera.live.headers` (CSP, no framing).
Inference services (``/api/services``, with ``tessera serve --mig-gpus``) have their routes in
:mod:`tessera.live.inference.routes`.
"""

from __future__ import annotations

import inspect
import logging
import sqlite3
from dataclasses import replace
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from tessera.errors import SpecError
from tessera.live.explain import explain
from tessera.live.headers import SecurityHeaders, headers_for
from tessera.live.idempotency import (
    HEADER,
    REPLAYED_HEADER,
    KeysInFlight,
    KeyUse,
    body_digest,
    check_key,
    principal_of,
)
from tessera.live.inference.routes import add_service_routes
from tessera.live.intake import (
    INLINE_BODY_BYTES,
    FastSubmit,
    GroupCommit,
    admit_body,
    admits_quickly,
    parse_submission,
)
from tessera.live.learned import speeds_json
from tessera.live.limits import BodyLimit
from tessera.live.metrics import ServiceMetrics
from tessera.live.names import JobNames
from tessera.live.progress_api import add_progress_route
from tessera.live.run_energy import energy_json
from tessera.live.service import Forbidden
from tessera.live.spec import MAX_GPUS
from tessera.live.store import Allocation, JobRecord, NewJob, StoreDamaged
from tessera.live.tenancy import Principal
from tessera.live.totals import OverCap
from tessera.live.visibility import (
    cluster_json,
    job_json,
    job_summary_json,
    latest_runs,
    log_retention_json,
    queues_json,
)

if TYPE_CHECKING:
    from tessera.live.service import LiveService

log = logging.getLogger("tessera.live.api")
_bearer = HTTPBearer(auto_error=False)
#: SQLite's result codes for a store that could not answer just now (503, try again); a store
#: that failed for good is :class:`StoreDamaged` (503 until it is restored).
_STORE_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL})
#: FastAPI's built-in OpenTelemetry hooks, off where FastAPI has them: the service exports no
#: telemetry, and asking the global providers costs a check on every request.
_NO_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


def create_app(svc: LiveService, api_docs: bool = False,
               metrics: ServiceMetrics | None = None) -> FastAPI:
    """Build the app around a started :class:`~tessera.live.service.LiveService`.

    Args:
        svc: the service; its tenancy config gives the API's limits.
        api_docs: serve ``/docs``, ``/redoc`` and ``/openapi.json`` (off by default).
        metrics: the service's metrics for ``GET /metrics`` (admin token only), shared with
            the metrics port; made here when not given.
    """
    limits = svc.tenancy.limits
    docs = {"docs_url": "/docs", "redoc_url": "/redoc", "openapi_url": "/openapi.json"}
    app = FastAPI(title="Tessera live scheduler", version="1",
                  **(docs if api_docs else dict.fromkeys(docs)), **_NO_TELEMETRY)
    commit = GroupCommit(svc)
    app.add_middleware(FastSubmit, svc=svc, commit=commit)  # inside BodyLimit: sizes checked
    app.add_middleware(BodyLimit, max_bytes=limits.body_bytes)
    app.add_middleware(SecurityHeaders)  # outermost: every answer gets the headers
    access = Access(svc)
    _add_error_handlers(app)
    _add_submit_route(app, svc, access, commit)
    _add_job_routes(app, svc, access)
    _add_cluster_routes(app, svc, access)
    add_log_route(app, svc, access.principal, access.visible)
    _add_metrics_route(app, metrics if metrics is not None else ServiceMetrics(svc), access)
    add_progress_route(app, svc)
    add_service_routes(app, svc, access.principal)
    _add_web_routes(app)
    return app


def _add_metrics_route(app: FastAPI, metrics: ServiceMetrics, access: Access) -> None:
    """``GET /metrics``: Prometheus' text format (:mod:`tessera.live.metrics`), for the admin
    token only -- the metrics name every queue, so a tenant gets 403 and learns nothing."""

    @app.get("/metrics", response_class=Response)
    def scrape(who: Principal = Depends(access.principal)) -> Response:
        if not who.admin:
            raise HTTPException(403, "/metrics covers every queue: only an admin token may "
                                     "read it")
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)


class Access:
    """Who calls (the bearer token) and what they may see: the routes' shared checks."""

    def __init__(self, svc: LiveService) -> None:
        self.svc = svc

    async def principal(self, cred: HTTPAuthorizationCredentials | None = Depends(_bearer)
                        ) -> Principal:
        """The caller (401 without a known token); a route dependency."""
        # async: a hash and a constant-time compare, too cheap to be worth a worker thread
        who = self.svc.tenancy.authenticate(cred.credentials if cred else None)
        if who is None:
            detail = "missing bearer token" if cred is None else "unknown token"
            raise HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})
        return who

    def visible(self, job_id: str, who: Principal) -> JobRecord:
        """The job, if ``who`` may see it; 404 otherwise, as for a job that does not exist."""
        rec = self.svc.store.get(job_id)
        if rec is None or not who.may_see(rec.queue):
            raise HTTPException(404, f"no job {job_id!r}")
        return rec

    def where(self, rec: JobRecord) -> Allocation | None:
        """The job's latest run: where it runs or last ran."""
        return latest_runs(self.svc.store, [rec]).get(rec.job_id)


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as JSON ``{"detail": ...}`` with its status (the module docstring)."""

    @app.exception_handler(SpecError)
    async def _spec_error(_req: Request, e: SpecError) -> JSONResponse:
        code = 403 if isinstance(e, Forbidden) else 429 if isinstance(e, OverCap) else 422
        return JSONResponse({"detail": str(e)}, status_code=code)

    @app.exception_handler(RequestValidationError)
    async def _bad_params(_req: Request, e: RequestValidationError) -> JSONResponse:
        lines = [f"{'.'.join(str(x)[:64] for x in err['loc'])}: {err['msg']}"
                 for err in e.errors()[:10]]
        return JSONResponse({"detail": "; ".join(lines)}, status_code=422)

    @app.exception_handler(StoreDamaged)
    async def _store_failed(_req: Request, e: StoreDamaged) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=503)

    @app.exception_handler(sqlite3.Error)
    async def _store_busy(req: Request, e: sqlite3.Error) -> JSONResponse:
        if getattr(e, "sqlite_errorcode", 0) & 0xFF not in _STORE_BUSY:
            return await _bug(req, e)  # a query that is wrong, not a store that is busy
        log.warning("%s %s: the job store could not answer: %s", req.method, req.url.path, e)
        return JSONResponse({"detail": f"the job store could not answer just now ({e}); try "
                             "again"}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _bug(req: Request, e: Exception) -> JSONResponse:
        log.error("%s %s failed", req.method, req.url.path, exc_info=e)
        return JSONResponse({"detail": f"internal error ({type(e).__name__}); the service "
                             "log has the details"}, status_code=500,
                            headers=headers_for(req.url.path))


def _add_submit_route(app: FastAPI, svc: LiveService, access: Access,
                      commit: GroupCommit) -> None:
    """``POST /api/jobs``: what the fast path (:class:`FastSubmit`) does not answer."""
    keys = KeysInFlight()
    principal, where = access.principal, access.where

    @app.post("/api/jobs", status_code=201, response_model=None,
              openapi_extra={"security": [{"HTTPBearer": []}]})
    async def submit(request: Request) -> JSONResponse:
        # Ordinary submissions are answered by FastSubmit before they get here; this route
        # takes the rest (YAML, large bodies, keyed submissions, refusals) and gives each its
        # status and message.
        who = await principal(await _bearer(request))
        ctype = request.headers.get("content-type", "application/json")
        body = await request.body()
        key = check_key(request.headers.get(HEADER))
        if key is None:
            # The job view is plain JSON values: answered as is, without FastAPI's encoder.
            stored = await commit.store(await admitted(body, ctype, who))
            return JSONResponse(job_json(stored), status_code=201)
        owner, digest = principal_of(who.name, who.queue), body_digest(body, ctype)

        async def create() -> str:
            new = await admitted(body, ctype, who)
            return (await commit.store(replace(new, key=KeyUse(owner, key, digest)))).job_id

        job_id, first_digest = await keys.once(
            owner, key, lambda: svc.store.keyed_job(owner, key, svc.clock()), create)
        if first_digest is not None and first_digest != digest:
            raise HTTPException(422, f"Idempotency-Key {key!r} was already used for a "
                                     f"different request (job {job_id}); use a new key for a "
                                     "new request")
        rec = svc.store.get(job_id)
        if rec is None:
            raise HTTPException(409, f"Idempotency-Key {key!r} names job {job_id}, which is "
                                     "no longer stored")
        replayed = first_digest is not None
        return JSONResponse({**job_json(rec, where(rec)), "replayed": replayed},
                            status_code=200 if replayed else 201,
                            headers={REPLAYED_HEADER: "true"} if replayed else None)

    async def admitted(body: bytes, ctype: str, who: Principal) -> NewJob:
        """Parse, validate and admit a body. A small JSON body is admitted right here: well
        under a millisecond, and a hop to a worker thread would cost more than it saves. YAML
        and large bodies take long enough to parse that they go to a worker thread."""
        if len(body) <= INLINE_BODY_BYTES and "yaml" not in ctype:
            req = parse_submission(svc, body, ctype)
            return (svc.admit(req, who) if admits_quickly(req)
                    else await run_in_threadpool(svc.admit, req, who))
        return await run_in_threadpool(admit_body, svc, body, ctype, who)


def _add_job_routes(app: FastAPI, svc: LiveService, access: Access) -> None:
    """Listing, reading, cancelling and explaining jobs."""
    principal, visible, where = access.principal, access.visible, access.where
    limits = svc.tenancy.limits

    def _names(who: Principal, recs: list[JobRecord]) -> JobNames:
        """What ``who`` may read named (another queue's name only with ``tenants_see_all``)."""
        return JobNames(svc.store, who, recs, sees_queues=svc.tenancy.sees_all(who))

    @app.get("/api/jobs")
    def list_jobs(state: str | None = Query(None, max_length=32),
                  active: bool = Query(False),
                  limit: int | None = Query(None, ge=1, le=limits.list_limit_max),
                  before: int | None = Query(None, ge=1, le=2**63 - 1),
                  who: Principal = Depends(principal)) -> dict[str, Any]:
        size = limit or min(limits.list_page_jobs, limits.list_limit_max)
        recs = svc.store.jobs(active_only=active, queue=who.queue, limit=size + 1,
                              state=state or None, before_seq=before)
        more = len(recs) > size  # one more than the page: older jobs exist
        if more:
            recs = recs[1:]
        runs = latest_runs(svc.store, recs)
        return {"jobs": _names(who, recs).scrub(
                    [job_summary_json(r, runs.get(r.job_id)) for r in recs]),
                "next_before": recs[0].seq if more else None}

    @app.get("/api/jobs/{job_id}")
    def get_job(job_id: str, who: Principal = Depends(principal)) -> dict[str, Any]:
        rec = visible(job_id, who)
        out = job_json(rec, where(rec))
        out["events"] = [{"ts_s": e.ts_s, "kind": e.kind, "from": e.from_state,
                          "to": e.to_state, "detail": e.detail}
                         for e in svc.store.events(job_id=job_id)]
        out.update(log_retention_json(rec, svc.tenancy.logs.retention_s))
        out["speeds"] = speeds_json(svc, rec)  # measured vs predicted (live.learned)
        out["energy"] = energy_json(svc.store._read, job_id)  # NVML, per run (live.run_power)
        return _names(who, [rec]).scrub(out)  # a partner's id, in text or events

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
        return _names(who, [rec]).scrub({**job_json(rec, where(rec)), "was": old.value})

    @app.get("/api/jobs/{job_id}/explain")
    def explain_job(job_id: str, who: Principal = Depends(principal)) -> dict[str, Any]:
        rec = visible(job_id, who)
        return _names(who, [rec]).scrub(explain(svc, rec, who))  # and reasons


def _add_cluster_routes(app: FastAPI, svc: LiveService, access: Access) -> None:
    """``/healthz`` (anyone), ``/api/queues`` and ``/api/cluster``."""
    principal = access.principal

    @app.get("/healthz", response_model=None)
    def healthz() -> dict[str, Any] | JSONResponse:
        """``ok`` and ``"store": "ok"``; a failed store: 503 with ``"store": "failed"`` (what
        happened is for the log and authenticated callers: this route answers anyone)."""
        if svc.store.fault is None:
            return {"ok": True, "rounds": svc.rounds, "executor": svc.executor.name,
                    "store": "ok", "stalled_rounds": svc.stalled_rounds, "stalls": svc.stalls}
        # Anyone may ask: what failed, where and why is in the log and the /api answers.
        return JSONResponse({"ok": False, "rounds": svc.rounds, "executor": svc.executor.name,
                             "store": "failed", "detail": "the job store failed; the service "
                             "has stopped deciding (the service log says why)"},
                            status_code=503)

    @app.get("/api/queues")
    def queues(who: Principal = Depends(principal)) -> dict[str, Any]:
        return queues_json(svc, who)

    @app.get("/api/cluster")
    def cluster(who: Principal = Depends(principal)) -> dict[str, Any]:
        return cluster_json(svc, who)


def _add_web_routes(app: FastAPI) -> None:
    """The dashboard's page, script, style and icon."""
    @app.get("/", response_class=HTMLResponse)
    @app.get("/dashboard", response_class=HTMLResponse)
    def dashboard() -> str:
        return _web_file("dashboard.html")

    # The page's script and style, as files: its CSP allows no inline script or style.
    @app.get("/dashboard.js", include_in_schema=False)
    def dashboard_js() -> Response:
        return Response(_web_file("dashboard.js"), media_type="text/javascript")

    @app.get("/dashboard.css", include_in_schema=False)
    def dashboard_css() -> Response:
        return Response(_web_file("dashboard.css"), media_type="text/css")

    # The page's icon: a small SVG of the service's own (img-src 'self'), nothing fetched
    # from elsewhere; browsers that ask for /favicon.ico get it too.
    @app.get("/favicon.svg", include_in_schema=False)
    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(_web_file("favicon.svg"), media_type="image/svg+xml")


def _web_file(name: str) -> str:
    return resources.files("tessera.web").joinpath(name).read_text()


# -- rank output (``tessera logs``) -----------------------------------------------------------

LOG_LIMIT_BYTES = 65536
#: Bounds of the log route's integers: a run number fits SQLite's 64-bit integers with room to
#: spare, an offset is a byte position a file can have (and a JSON number keeps exactly).
MAX_RUN = 2**31 - 1
MAX_OFFSET_BYTES = 2**53


def add_log_route(app: FastAPI, svc: LiveService, principal: Any, visible: Any) -> None:
    """``GET /api/jobs/{id}/logs?rank=&run=&offset=``: a piece of one rank's output.

    The executor reads it where the rank ran (the local run directory, or the rank's Ray
    actor on its own node), so no shared filesystem is needed. Visible to the job's own
    tenant and the admin only (404 otherwise, like every job route). ``run`` defaults to the
    job's latest launched run; the answer's ``next_offset`` continues the read (``--follow``).
    Every integer is bounded (422 outside): ``rank`` 0 to ``MAX_GPUS - 1``, ``run`` 1 to
    :data:`MAX_RUN`, ``offset`` 0 to :data:`MAX_OFFSET_BYTES`, ``limit`` 1 to
    :data:`LOG_LIMIT_BYTES`.
    """

    @app.get("/api/jobs/{job_id}/logs")
    def job_logs(job_id: str, rank: int = Query(0, ge=0, lt=MAX_GPUS),
                 run: int | None = Query(None, ge=1, le=MAX_RUN),
                 offset: int = Query(0, ge=0, le=MAX_OFFSET_BYTES),
                 limit: int = Query(LOG_LIMIT_BYTES, ge=1, le=LOG_LIMIT_BYTES),
                 who: Principal = Depends(principal)) -> dict[str, Any]:
        rec = visible(job_id, who)
        runs = [run] if run is not None else list(range(rec.runs, 0, -1))
        for r in runs:
            a = svc.store.allocation(job_id, r)
            if a is None or (a.started_s is None and a.status != "running"):
                continue
            ranks = a.placement.num_gpus or len(a.placement.gpus_by_node)  # (CPU-only: a node)
            if not 0 <= rank < ranks:
                raise HTTPException(409, f"run {r} of {job_id} has ranks 0..."
                                         f"{ranks - 1}, not {rank}")
            chunk = svc.executor.read_log(job_id, r, rank, offset, limit)
            return {"job_id": job_id, "run": r, "rank": rank, "ranks": ranks,
                    "running": a.status in ("running", "stopping"), "final": rec.final,
                    "text": chunk.text if chunk else "",
                    "next_offset": chunk.next_offset if chunk else offset,
                    "size_bytes": chunk.size_bytes if chunk else 0,
                    "skipped_bytes": chunk.skipped_bytes if chunk else 0}
        return {"job_id": job_id, "run": None, "rank": rank, "ranks": 0, "running": False,
                "final": rec.final, "text": "", "next_offset": 0, "size_bytes": 0,
                "skipped_bytes": 0}
