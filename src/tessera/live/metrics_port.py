"""``tessera serve --metrics-port``: ``/metrics`` without a token, on a loopback port.

A Prometheus agent on the service's own host (or a sidecar reached through it) scrapes without
a token here. The port has no authentication, so it is bound to a loopback address only
(``127.0.0.1`` by default, ``::1`` or another ``127.x`` address when given as ``HOST:PORT``);
any other address is refused in one line before anything starts. It serves ``GET /metrics``
and nothing else (404 for every other path, 405 for other methods), with the API's security
headers. From elsewhere, scrape the API port's ``/metrics`` with the admin token.

It runs as a second uvicorn server on a thread of its own beside the API's, on a socket bound
when ``serve`` starts (so a port in use stops ``serve`` before anything is written).
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST

from tessera.errors import SpecError
from tessera.live.headers import SecurityHeaders
from tessera.live.limits import Asgi, Message, Receive, Send
from tessera.live.metrics import ServiceMetrics

DEFAULT_HOST = "127.0.0.1"


def parse_metrics_address(text: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (``[::1]:PORT`` for IPv6) → ``(host, port)``, the host a
    loopback address.

    Raises:
        SpecError: not a port number, or a host that is not a loopback address.
    """
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]") if sep else DEFAULT_HOST
    if host == "localhost":
        host = DEFAULT_HOST
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SpecError(f"--metrics-port {text!r}: expected PORT or HOST:PORT with a port "
                        "from 1 to 65535")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise SpecError(f"--metrics-port {text!r}: refusing to serve metrics without a token "
                        f"on {host}, which is not a loopback address; use 127.0.0.1 (or ::1), "
                        "or scrape the API's /metrics with the admin token")
    return host, int(port_text)


def metrics_app(metrics: ServiceMetrics) -> Asgi:
    """The ASGI app of the metrics port: ``GET``/``HEAD /metrics`` only, security headers on
    every answer."""

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            status, ctype, body = 404, "text/plain", b"not found; this port serves /metrics\n"
        elif scope["method"] not in ("GET", "HEAD"):
            status, ctype, body = 405, "text/plain", b"method not allowed\n"
        else:  # the store's reads hold its lock: off the event loop
            status, ctype, body = 200, CONTENT_TYPE_LATEST, await asyncio.to_thread(
                metrics.render)
        headers = [(b"content-type", ctype.encode()),
                   (b"content-length", str(len(body)).encode())]
        if status == 405:
            headers.append((b"allow", b"GET, HEAD"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body",
                    "body": b"" if scope["method"] == "HEAD" else body})

    return SecurityHeaders(app)


class MetricsServer:
    """The metrics port's uvicorn server on its own thread; :meth:`stop` ends it."""

    def __init__(self, metrics: ServiceMetrics, sock: Any) -> None:
        config = uvicorn.Config(metrics_app(metrics), log_level="warning", access_log=False,
                                proxy_headers=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name="tessera-metrics", daemon=True)

    def start(self) -> None:
        self.thread.start()

    @property
    def started(self) -> bool:
        return bool(self.server.started)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
