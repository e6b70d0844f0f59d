"""``Idempotency-Key`` on ``POST /api/jobs``: a retried submission never stores a second job.

A client that sends a submission and then loses the connection (the service was killed, the
network dropped) cannot tell whether the job was stored. With a key it simply sends the same
request again with the same key: the service answers the job the first request stored (``200``,
``"replayed": true`` and the header ``Idempotent-Replayed: true``) instead of storing another.
This is the scheme of Stripe's API and of the IETF draft *The Idempotency-Key HTTP Header
Field*:

* a key is chosen by the client (``tessera submit`` uses a random UUID per invocation), 1 to
  255 visible ASCII characters (else ``400``);
* it belongs to the caller that used it (the token's name and queue), so two tenants' keys
  never meet;
* the same key with a different body (its SHA-256, with the body's format) is refused with
  ``422``: the client reused a key for another request, which is a bug to report, not a job to
  guess at;
* a key is remembered for :data:`KEY_TTL_S` (24 hours); after that it may name a new job;
* the key is written in the **same transaction** as its job (:meth:`~tessera.live.store.Store.
  add_jobs`), in the ``idempotency_keys`` table of the store: a service killed at any point of
  a submission has stored both or neither, and a restart keeps them;
* two requests with one key at the same time: the second waits for the first and is answered
  its job (an in-process table of keys in flight; the service is one process).

The first answer to a keyed request is the usual ``201`` job view with ``"replayed": false``.
A replay answers the job as it is *now* (its state may have moved on), not a copy of the first
answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

#: How long a key is remembered (seconds).
KEY_TTL_S = 24 * 3600.0
#: The longest key accepted (characters).
KEY_MAX_CHARS = 255
HEADER = "idempotency-key"
REPLAYED_HEADER = "Idempotent-Replayed"

SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
    principal TEXT NOT NULL, key TEXT NOT NULL, body_sha256 TEXT NOT NULL,
    job_id TEXT NOT NULL, created_s REAL NOT NULL, PRIMARY KEY (principal, key));
CREATE INDEX IF NOT EXISTS idempotency_created ON idempotency_keys(created_s);
"""


@dataclass(frozen=True, slots=True)
class KeyUse:
    """One use of a key: whose (``principal``), which key, and the request it came with."""

    principal: str
    key: str
    body_sha256: str


def check_key(raw: str | None) -> str | None:
    """The header's key (``None``: no header).

    Raises:
        HTTPException: 400 for an empty, too long or non-printable key.
    """
    if raw is None:
        return None
    from fastapi import HTTPException  # lazy: optional live extra (+0.18 s); the store imports us

    if not 1 <= len(raw) <= KEY_MAX_CHARS or not all("!" <= c <= "~" for c in raw):
        raise HTTPException(400, f"Idempotency-Key must be 1 to {KEY_MAX_CHARS} visible ASCII "
                                 "characters (no spaces), e.g. a UUID")
    return raw


def principal_of(name: str, queue: str | None) -> str:
    """The owner of a key: the token's name and its queue (``*`` for the admin)."""
    return f"{name}@{queue if queue is not None else '*'}"


def body_digest(body: bytes, ctype: str) -> str:
    """What "the same request" means: the body's bytes and whether they are YAML or JSON."""
    fmt = b"yaml" if "yaml" in ctype else b"json"
    return hashlib.sha256(fmt + b"\0" + body).hexdigest()


def record(db: sqlite3.Connection, use: KeyUse, job_id: str, now_s: float) -> None:
    """Remember ``use`` for ``job_id`` (inside the transaction that stores the job) and forget
    keys older than :data:`KEY_TTL_S`. ``OR REPLACE``: a key found here is an expired one
    (:func:`lookup` answered every live one before the job was admitted)."""
    db.execute("DELETE FROM idempotency_keys WHERE created_s < ?", (now_s - KEY_TTL_S,))
    db.execute("INSERT OR REPLACE INTO idempotency_keys VALUES (?, ?, ?, ?, ?)",
               (use.principal, use.key, use.body_sha256, job_id, now_s))


def lookup(db: sqlite3.Connection, principal: str, key: str,
           now_s: float) -> tuple[str, str] | None:
    """``(job_id, body_sha256)`` of a live key of ``principal``; ``None`` when unknown or
    expired."""
    row = db.execute("SELECT job_id, body_sha256 FROM idempotency_keys WHERE principal=? AND "
                     "key=? AND created_s >= ?", (principal, key, now_s - KEY_TTL_S)).fetchone()
    return (str(row[0]), str(row[1])) if row else None


class KeysInFlight:
    """Serializes the requests of one key: the second waits for the first's job."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def once(self, principal: str, key: str,
                   find: Callable[[], tuple[str, str] | None],
                   create: Callable[[], Awaitable[str]]) -> tuple[str, str | None]:
        """The job of ``key``: found by ``find`` (``(job_id, body_sha256)``) or made by
        ``create`` (its job id), never both for one key at once.

        Returns:
            the job id and, for a job found rather than made, the digest it was stored with.
        """
        slot = (principal, key)
        while (running := self._running.get(slot)) is not None:
            await asyncio.shield(running)  # the first request ends (stored or refused)
        found = find()
        if found is not None:
            return found[0], found[1]
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._running[slot] = done
        try:
            return await create(), None
        finally:
            del self._running[slot]
            done.set_result(None)
