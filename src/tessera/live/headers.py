"""Security headers on every answer of the service: the dashboard's and the API's.

The dashboard is a page that holds a token, so it must not run anything but its own script,
load anything from elsewhere, or be framed by another site (clickjacking). Its HTML, script and
style are three files served by the service (``/dashboard``, ``/dashboard.js``,
``/dashboard.css``), with no inline script, style or event handler, so the policy needs no
``'unsafe-inline'``:

==============================  ===============================================================
 ``Content-Security-Policy``    the dashboard: :data:`DASHBOARD_CSP` (its own script, style and
                                API only); every other answer: :data:`API_CSP` (nothing at all);
                                the ``--api-docs`` pages: only ``frame-ancestors 'none'`` (they
                                load FastAPI's Swagger UI and ReDoc with inline script)
 ``X-Frame-Options``            ``DENY`` (``frame-ancestors 'none'`` for older browsers)
 ``X-Content-Type-Options``     ``nosniff``: a JSON answer is never run as a script
 ``Referrer-Policy``            ``no-referrer``: the dashboard's URL (``#token=`` stays in the
                                browser, but the path and host need not travel either)
==============================  ===============================================================

:class:`SecurityHeaders` is the outermost ASGI middleware, so the answers of the short
submission path and of the body-size limit get the headers too; a 500 is sent by Starlette's
error layer, outside every middleware, and carries them through :func:`headers_for`.
"""

from __future__ import annotations

from tessera.live.limits import Asgi, Message, Receive, Send

DASHBOARD_PATHS = frozenset({"/", "/dashboard"})
DOCS_PATHS = frozenset({"/docs", "/redoc", "/docs/oauth2-redirect"})
DASHBOARD_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                 "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
API_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
DOCS_CSP = "frame-ancestors 'none'"
_COMMON = [(b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer")]


def csp_for(path: str) -> str:
    """The ``Content-Security-Policy`` of the answer to ``path``."""
    if path in DASHBOARD_PATHS:
        return DASHBOARD_CSP
    return DOCS_CSP if path in DOCS_PATHS else API_CSP


def headers_for(path: str) -> dict[str, str]:
    """The headers of an answer to ``path``, for one built outside the middleware: Starlette
    sends a 500 from its outermost layer, past every middleware of the app."""
    return {"content-security-policy": csp_for(path),
            **{k.decode(): v.decode() for k, v in _COMMON}}


class SecurityHeaders:
    """ASGI middleware: adds the headers in the module docstring to every HTTP answer."""

    def __init__(self, app: Asgi) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        added = [(b"content-security-policy", csp_for(scope["path"]).encode()), *_COMMON]

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        await self.app(scope, receive, with_headers)
