"""``POST /api/progress/{job}/{run}``: where a running job reports its progress.

The caller proves it is that run with the run's own token (``Authorization: Bearer
<TESSERA_PROGRESS_TOKEN>``, :mod:`tessera.live.progress`); tenant and admin tokens are refused
(403): a person cannot post reports in a job's name. The body is JSON ``{"steps": ...,
"samples": ..., "gns": ..., "local_batch": ...}`` (``local_batch``: samples per GPU per
step, :mod:`tessera.live.step_fits`). Answers: 200 accepted; 401 no token; 403 not this run's
token; 404 no such run; 409 the run is not running; 422 a refused value (with an event on the job);
429 more than one report a second. The token is never logged, stored in an event or served.

``GET /api/slow-nodes`` lists the nodes the slow-node rule marked (:mod:`tessera.live.slownodes`)
and ``DELETE /api/slow-nodes/{node}`` clears one (an event says who); both for the admin only
(403 for a tenant: the nodes' speeds are everyone's jobs' evidence).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

if TYPE_CHECKING:
    from tessera.live.service import LiveService

log = logging.getLogger("tessera.live.progress")
_bearer = HTTPBearer(auto_error=False)
#: A report is three numbers: a larger body is refused unread (413).
MAX_REPORT_BYTES = 4096


def add_progress_route(app: FastAPI, svc: LiveService) -> None:
    """Add the report route (see the module docstring)."""

    @app.post("/api/progress/{job_id}/{run}")
    async def report(job_id: str, run: int, request: Request) -> dict[str, Any]:
        cred = await _bearer(request)
        if cred is None:
            raise HTTPException(401, "missing bearer token (the run's TESSERA_PROGRESS_TOKEN)",
                                headers={"WWW-Authenticate": "Bearer"})
        if svc.tenancy.authenticate(cred.credentials) is not None:
            raise HTTPException(403, "a tenant or admin token cannot post progress reports; "
                                     "only the run's TESSERA_PROGRESS_TOKEN can")
        raw = await request.body()
        if len(raw) > MAX_REPORT_BYTES:
            raise HTTPException(413, f"a report is at most {MAX_REPORT_BYTES} bytes")
        try:
            body = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):
            body = None
        out = svc.progress.report(job_id, run, cred.credentials, body, svc.clock())
        if out.event is not None:
            with svc.store.tx() as db:
                svc.store.event(db, svc.clock(), job_id, "progress", out.event)
        if out.status != 200:
            if out.status in (403, 422):
                log.info("progress report for %r run %s refused: %s", job_id, run, out.detail)
            raise HTTPException(out.status, out.detail)
        return {"accepted": True}

    def admin(cred: HTTPAuthorizationCredentials | None) -> str:
        who = svc.tenancy.authenticate(cred.credentials if cred else None)
        if who is None:
            raise HTTPException(401, "missing bearer token" if cred is None else "unknown token",
                                headers={"WWW-Authenticate": "Bearer"})
        if not who.admin:
            raise HTTPException(403, "only the admin sees and clears slow nodes")
        return who.name

    @app.get("/api/slow-nodes")
    def slow_nodes(cred: HTTPAuthorizationCredentials | None = Depends(_bearer)
                   ) -> dict[str, Any]:
        admin(cred)
        return {"slow_nodes": [{"node": n, "last_slow_s": t}
                               for n, t in sorted(dict(svc.slow_nodes.marked).items())]}

    @app.delete("/api/slow-nodes/{node}")
    def clear_slow(node: str, cred: HTTPAuthorizationCredentials | None = Depends(_bearer)
                   ) -> dict[str, Any]:
        name = admin(cred)
        if svc.slow_nodes.marked.pop(node, None) is None:
            raise HTTPException(404, f"node {node!r} is not marked slow")
        with svc.store.tx() as db:
            svc.store.event(db, svc.clock(), None, "slow-node",
                            f"node {node} cleared by {name}: gangs may be placed there")
        svc.poke()
        return {"cleared": node}
