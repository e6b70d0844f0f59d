"""``/api/services``: submit, list, show, change the rate of, and delete inference services.

Every route needs a bearer token, as the rest of ``/api``. A tenant sees and changes only the
services of its own queue: another tenant's service answers **404** like one that does not
exist; submitting to another tenant's queue answers **403**. Errors are one-line JSON
``{"detail": ...}``: 400 a body that is not JSON, 409 a ``tessera serve`` without a device
layer (``--mig-gpus``), 422 a spec that fails validation or that no
layout, quota or GPU count allows (the detail says which).

=======  ===============================  ==================================================
method   path                             what
=======  ===============================  ==================================================
POST     ``/api/services``                a service spec (:mod:`.spec`) → 201, the service
GET      ``/api/services``                the services you may see, with their replicas
GET      ``/api/services/<name>``         one service: spec, replicas, slices, events
POST     ``/api/services/<name>/rate``    ``{"rate_rps": 800}``: the loop re-plans
DELETE   ``/api/services/<name>``         its replicas stop, its slices go
=======  ===============================  ==================================================
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from tessera.live.inference.manager import InferenceManager
from tessera.live.inference.spec import RateRequest, ServiceSpec, parse_service
from tessera.live.tenancy import Principal

if TYPE_CHECKING:
    from tessera.live.service import LiveService


def service_json(m: InferenceManager, spec: ServiceSpec, events: bool = False
                 ) -> dict[str, Any]:
    """A service as the API and ``tessera service show`` give it."""
    slots = m.applied().slots()
    out: dict[str, Any] = {
        "name": spec.name, "model": spec.model, "slo_ms": spec.slo_ms,
        "rate_rps": spec.rate_rps, "queue": spec.queue, "min_replicas": spec.min_replicas,
        "command": list(spec.command),
        "slices": [{"gpu": dev, "placement": pl, "profile": m.gpu.profile(seg.kind).name,
                    "batch": seg.batch, "procs": seg.procs,
                    "throughput_rps": round(seg.throughput_rps, 3)}
                   for (dev, pl), seg in sorted(slots.items()) if seg.service == spec.name],
        "replicas": [{"replica_id": r.replica_id, "run": r.run, "gpu": r.gpu,
                      "placement": r.placement, "mig_uuid": r.mig_uuid,
                      "mps_process": f"{r.proc + 1}/{r.procs}", "status": r.status,
                      "restarts": r.restarts} for r in m.book.replicas(spec.name)],
    }
    if events:
        out["events"] = [{"ts_s": e.ts_s, "kind": e.kind, "detail": e.detail}
                         for e in m.book.events(spec.name)]
    return out


def add_service_routes(app: FastAPI, svc: LiveService, principal: Any) -> None:
    """Add the routes of the module docstring; ``principal``: the API's token dependency."""

    def manager() -> InferenceManager:
        m = svc.inference
        if not isinstance(m, InferenceManager):
            raise HTTPException(409, "this tessera serve runs no inference services: start it "
                                "with --mig-gpus nvml (fake:A100-80GB:2 without a GPU)")
        return m

    def visible(m: InferenceManager, name: str, who: Principal) -> ServiceSpec:
        try:
            return m.visible(name, who)
        except KeyError:
            raise HTTPException(404, f"no service {name!r}") from None

    async def body_of(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except ValueError:
            raise HTTPException(400, "the body is not valid JSON") from None

    @app.post("/api/services", status_code=201)
    async def submit(request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
        m = manager()
        spec = parse_service(await body_of(request), who.queue or "default")
        await run_in_threadpool(m.submit, spec, who)  # the store and the planner block
        return service_json(m, spec)

    @app.get("/api/services")
    def list_services(who: Principal = Depends(principal)) -> dict[str, Any]:
        m = manager()
        return {"services": [service_json(m, s) for s in m.book.services()
                             if who.may_see(s.queue)]}

    @app.get("/api/services/{name}")
    def show(name: str, who: Principal = Depends(principal)) -> dict[str, Any]:
        m = manager()
        return service_json(m, visible(m, name, who), events=True)

    @app.post("/api/services/{name}/rate")
    async def rate(name: str, request: Request,
                   who: Principal = Depends(principal)) -> dict[str, Any]:
        m = manager()
        visible(m, name, who)
        try:
            body = RateRequest.model_validate(await body_of(request))
        except ValidationError as e:
            raise HTTPException(422, "; ".join(f"{'.'.join(map(str, er['loc']))}: {er['msg']}"
                                               for er in e.errors())) from None
        return service_json(m, await run_in_threadpool(m.set_rate, name, body.rate_rps, who))

    @app.delete("/api/services/{name}")
    def delete(name: str, who: Principal = Depends(principal)) -> dict[str, Any]:
        m = manager()
        visible(m, name, who)
        m.delete(name, who)
        return {"name": name, "deleted": True}
