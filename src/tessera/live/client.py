"""A small HTTP client for the live API (used by the CLI and the benchmark)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from tessera.errors import TesseraError

DEFAULT_SERVER = "http://127.0.0.1:8470"


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
                 timeout_s: float = 10.0) -> None:
        self.server = (server or os.environ.get("TESSERA_SERVER") or DEFAULT_SERVER).rstrip("/")
        tok = token or os.environ.get("TESSERA_TOKEN")
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout_s)

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

    def submit_yaml(self, text: str) -> dict[str, Any]:
        return self._call("POST", "/api/jobs", content=text.encode(),
                          headers={"content-type": "application/yaml"})

    def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/api/jobs", json=request)

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

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("POST", f"/api/jobs/{job_id}/cancel")

    def explain(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/jobs/{job_id}/explain")

    def queues(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/queues")["queues"])

    def cluster(self) -> dict[str, Any]:
        return self._call("GET", "/api/cluster")

    def logs(self, job_id: str, rank: int = 0, run: int | None = None,
             offset: int = 0) -> dict[str, Any]:
        """A piece of rank ``rank``'s output from byte ``offset`` (latest run by default)."""
        params: dict[str, int] = {"rank": rank, "offset": offset}
        if run is not None:
            params["run"] = run
        return self._call("GET", f"/api/jobs/{job_id}/logs", params=params)
