"""Submissions on the API's event loop: group commit, and a short path for the common case.

A submission is answered ``201`` only once its job is committed to the store, so an accepted
job is never lost. Two things make that cheap under load:

* **Group commit** (:class:`GroupCommit`). Submissions handled in the same turn of the event
  loop are stored in one transaction: each request queues its admitted job and waits; the first
  one schedules a flush with ``call_soon``, which runs after the other requests already waiting
  in that turn have queued theirs. One ``COMMIT`` (and one wake-up of the scheduling loop) then
  serves them all, and each request is answered after that commit. A lone submission is
  committed alone, at once: no timer, no added latency.
* **The short path** (:class:`FastSubmit`). ``POST /api/jobs`` with a small JSON body, a
  known token and no ``Idempotency-Key`` -- every ordinary submission -- is answered by a
  plain ASGI handler in front of FastAPI's routing, exception and dependency layers, which
  cost more CPU than the submission itself. It runs exactly the route's checks
  (:func:`admit_body`). Anything else -- no or an unknown token, YAML, a large body, a keyed
  request (:mod:`tessera.live.idempotency`), a request the checks refuse -- is handed to the
  FastAPI route with the body replayed, so every error keeps the one status and message the
  API documents (a refused request is then checked twice; refusals are not the hot path).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import TYPE_CHECKING

from fastapi import HTTPException

from tessera.live.faults import crash_point
from tessera.live.idempotency import HEADER
from tessera.live.layout import Layout
from tessera.live.limits import (
    Asgi,
    BodyError,
    BodyTooLarge,
    Message,
    Receive,
    Send,
    parse_body,
    replay_body,
)
from tessera.live.spec import JobRequest, validate_request
from tessera.live.store import JobRecord, NewJob, StoreDamaged
from tessera.live.tenancy import Principal
from tessera.live.visibility import job_json

if TYPE_CHECKING:
    from tessera.live.service import LiveService

#: A JSON submission up to this size is parsed and admitted on the event loop's thread.
INLINE_BODY_BYTES = 16384
_JSON_HEADERS = [(b"content-type", b"application/json")]
_KEY_HEADER = HEADER.encode()


def parse_submission(svc: LiveService, body: bytes, ctype: str) -> JobRequest:
    """Parse and validate a submission body (cheap for a small JSON body).

    Raises:
        HTTPException: 400/413 for a body that cannot be parsed within the limits, 422 for a
            checkpoint dir the service owns.
        SpecError: a request that fails validation (422).
    """
    limits = svc.tenancy.limits
    try:
        raw = parse_body(body.decode("utf-8", errors="replace"),
                         "yaml" if "yaml" in ctype else "json", limits)
    except BodyError as e:
        raise HTTPException(413 if isinstance(e, BodyTooLarge) else 400, str(e)) from None
    req = validate_request(raw, limits)
    if req.checkpoint_dir is not None:
        problem = Layout(svc.store.path.parent, svc.work_dir).checkpoint_dir_problem(
            req.checkpoint_dir)
        if problem is not None:
            raise HTTPException(422, f"invalid job request: {problem}")
    return req


def admits_quickly(req: JobRequest) -> bool:
    """Whether admitting ``req`` is cheap enough for the event loop's thread. A 3-D job's
    admission plans it on every allowed flavor (seconds for a large model), which must not
    stall every other request: it goes to a worker thread."""
    return req.parallelism != "3d"


def admit_body(svc: LiveService, body: bytes, ctype: str, who: Principal) -> NewJob:
    """Parse, validate and admit a submission body (nothing is stored yet).

    Raises:
        HTTPException: as :func:`parse_submission`.
        SpecError: a request that fails validation (422), or that
            :meth:`~tessera.live.service.LiveService.admit` refuses (403/422).
    """
    return svc.admit(parse_submission(svc, body, ctype), who)


class GroupCommit:
    """Stores admitted jobs for the requests of one event loop, a turn's worth per commit."""

    def __init__(self, svc: LiveService) -> None:
        self._svc = svc
        self._waiting: list[tuple[NewJob, asyncio.Future[JobRecord]]] = []

    async def store(self, new: NewJob) -> JobRecord:
        """Store ``new`` with whatever else this turn of the loop submits; its record, once
        committed. Raises what storing raised (the whole group's commit failed)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[JobRecord] = loop.create_future()
        self._waiting.append((new, done))
        if len(self._waiting) == 1:
            loop.call_soon(self._flush)
        return await done

    def _flush(self) -> None:
        group, self._waiting = self._waiting, []
        try:
            recs = self._svc.store_jobs([new for new, _ in group])
        except Exception as e:  # nothing of the group was stored: each request gets the error
            for _, done in group:
                if not done.done():
                    done.set_exception(e)
            return
        crash_point("after-submit")  # stored, not yet answered: what a retry's key is for
        for (_, done), rec in zip(group, recs, strict=True):
            if not done.done():  # a request whose client went away: stored all the same
                done.set_result(rec)


class FastSubmit:
    """ASGI middleware: ``POST /api/jobs`` with a small JSON body and a known token, answered
    without FastAPI's layers (see the module docstring); every other request passes through."""

    def __init__(self, app: Asgi, svc: LiveService, commit: GroupCommit) -> None:
        self.app = app
        self.svc = svc
        self.commit = commit
        self.max_bytes = min(INLINE_BODY_BYTES, svc.tenancy.limits.body_bytes)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/api/jobs":
            await self.app(scope, receive, send)
            return
        who, ctype, length, keyed = self._headers(scope)
        if (who is None or "yaml" in ctype or length is None or length > self.max_bytes
                or keyed):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            req = parse_submission(self.svc, body, ctype)
            new = self.svc.admit(req, who) if admits_quickly(req) else None
        except Exception:  # the route answers it, with the API's status and message
            new = None
        if new is None or self.svc.store.fault is not None:
            # refused, slow to admit, or a failed store: the route (and its worker threads)
            await self.app(scope, replay_body(body, receive), send)
            return
        try:
            rec = await self.commit.store(new)
        except (StoreDamaged, sqlite3.Error):  # nothing was stored; the route answers 503
            await self.app(scope, replay_body(body, receive), send)
            return
        out = json.dumps(job_json(rec), ensure_ascii=False, allow_nan=False,
                         separators=(",", ":")).encode()
        await send({"type": "http.response.start", "status": 201,
                    "headers": [*_JSON_HEADERS, (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})

    def _headers(self, scope: Message) -> tuple[Principal | None, str, int | None, bool]:
        """The caller (``None``: no or an unknown bearer token), the content type, the
        declared body length (``None``: none, or not a number), and whether the request
        carries an ``Idempotency-Key``."""
        auth: str | None = None
        ctype: str | None = None
        length: int | None = None
        keyed = False
        for name, value in scope["headers"]:  # the first of each, as the route reads them
            if name == b"authorization" and auth is None:
                auth = value.decode("latin-1")
            elif name == b"content-type" and ctype is None:
                ctype = value.decode("latin-1")
            elif name == b"content-length":  # at most 18 digits: int() of 5,000 would raise
                length = int(value) if value.isdigit() and len(value) <= 18 else None
            elif name == _KEY_HEADER:
                keyed = True
        scheme, _, token = (auth or "").partition(" ")
        who = self.svc.tenancy.authenticate(token.strip()) if scheme.lower() == "bearer" \
            else None
        return who, "application/json" if ctype is None else ctype, length, keyed


