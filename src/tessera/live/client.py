"""A small HTTP client for the live API (used by the CLI and the benchmark).

A submission given an ``Idempotency-Key`` (:mod:`tessera.live.idempotency`) is sent once more,
with the same key, when the connection fails before an answer came (:data:`SUBMIT_RETRIES`):
the service then answers the job the first try stored, if it stored one, and never stores a
second. Without a key nothing is retried: a retry could submit the job twice.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from tessera.errors import TesseraError

DEFAULT_SERVER = "http://127.0.0.1:8470"
#: How often a keyed submission is sent again after a failed connection, and after how long.
SUBMIT_RETRIES = 1
SUBMIT_RETRY_PAUSE_S = 1.0


class ApiError(TesseraError):
    """The server answered with an error status; the message is its ``detail``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{detail} (HTTP {status})")
        self.status = status


class ServiceUnreachable(TesseraError):
    """No service answered at the client's URL (not started, wrong host or port)."""


class Client:
    """Calls the API with a bearer token; every method returns decoded JSON."""

    def __init__(self, server: str | None = None, token: str | None = None,
                 timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None) -> None:
        self.server = (server or os.environ.get("TESSERA_SERVER") or DEFAULT_SERVER).rstrip("/")
        tok = token or os.environ.get("TESSERA_TOKEN")
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout_s,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise ServiceUnreachable(f"cannot reach {self.server}: {e}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            if isinstance(detail, list):  # FastAPI's own validation errors
                detail = "; ".join(str(d.get("msg", d)) for d in detail)
            raise ApiError(r.status_code, str(detail))
        return r.json()

    def submit_yaml(self, text: str, idempotency_key: str | None = None) -> dict[str, Any]:
        """Submit a job YAML; with ``idempotency_key``, retried as the module docstring says
        (the answer's ``replayed`` is then true when the first try had stored the job)."""
        headers = {"content-type": "application/yaml"}
        return self._submit(text.encode(), headers, idempotency_key)

    def submit(self, request: dict[str, Any],
               idempotency_key: str | None = None) -> dict[str, Any]:
        """Submit a job request given as a mapping (sent as JSON); retries as
        :meth:`submit_yaml`."""
        body = json.dumps(request).encode()
        return self._submit(body, {"content-type": "application/json"}, idempotency_key)

    def _submit(self, body: bytes, headers: dict[str, str],
                idempotency_key: str | None) -> dict[str, Any]:
        if idempotency_key is None:
            return self._call("POST", "/api/jobs", content=body, headers=headers)
        headers = {**headers, "Idempotency-Key": idempotency_key}
        for retry in range(SUBMIT_RETRIES + 1):
            try:
                return self._call("POST", "/api/jobs", content=body, headers=headers)
            except ServiceUnreachable:
                if retry == SUBMIT_RETRIES:
                    raise
                time.sleep(SUBMIT_RETRY_PAUSE_S)
        raise AssertionError("unreachable")  # the loop returns or raises

    def jobs(self, state: str | None = None, most: int = 10_000) -> list[dict[str, Any]]:
        """The newest ``most`` jobs visible to the token (summaries: no ``command``),
        optionally only those in ``state`` (``pending`` …), oldest first; gathered page by
        page from the server."""
        params: dict[str, Any] = {"state": state} if state else {}
        out: list[dict[str, Any]] = []
        while len(out) < most:
            page = self._call("GET", "/api/jobs", params={**params,
                                                           "limit": min(most - len(out), 500)})
            out = list(page["jobs"]) + out
            cursor = page.get("next_before")
            if cursor is None:
                break
            params["before"] = cursor
        return out

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/jobs/{job_id}")

    def services_call(self, method: str, path: str = "",
                      body: dict[str, Any] | None = None) -> Any:
        """``/api/services<path>`` (:mod:`tessera.live.inference.routes`), ``body`` as JSON."""
        return self._call(method, "/api/services" + path,
                          **({} if body is None else {"json": body}))

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("POST", f"/api/jobs/{job_id}/cancel")

    def explain(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/jobs/{job_id}/explain")

    def queues(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/queues")["queues"])

    def cluster(self) -> dict[str, Any]:
        return self._call("GET", "/api/cluster")

    def slow_nodes(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/slow-nodes")["slow_nodes"])

    def clear_slow_node(self, node: str) -> dict[str, Any]:
        return self._call("DELETE", f"/api/slow-nodes/{node}")

    def logs(self, job_id: str, rank: int = 0, run: int | None = None,
             offset: int = 0) -> dict[str, Any]:
        """A piece of rank ``rank``'s output from byte ``offset`` (latest run by default)."""
        params: dict[str, int] = {"rank": rank, "offset": offset}
        if run is not None:
            params["run"] = run
        return self._call("GET", f"/api/jobs/{job_id}/logs", params=params)
