"""Bounds on what the API accepts, and parsers that honour them.

Every input a tenant controls has a ceiling, so no request can make the service (or the
dashboard, which re-reads every job each second) move megabytes or recurse until Python gives
up. The ceilings are :class:`ApiLimits`; an operator changes them in the ``limits:`` section of
``tessera-live.yaml``::

    limits: {body_bytes: 262144, env_entries: 32}

A request over a ceiling gets a 4xx answer that names the field and the limit:

==============  =====  ===============================================================
 what           code   default
==============  =====  ===============================================================
 body           413    1 MiB, refused from ``Content-Length`` or while reading, never
                       read past the limit
 nesting        400    32 levels of JSON or YAML; YAML anchors and aliases are refused
 fields         422    see the attributes below
 ``?limit=``    422    1 .. 10,000 (also the most ``/api/jobs`` lists without it)
==============  =====  ===============================================================
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

if TYPE_CHECKING:
    from tessera.live.spec import JobRequest

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Message, Receive, Send], Awaitable[None]]


class BodyError(ValueError):
    """A request body that cannot be parsed within the limits (answered 400)."""


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class ApiLimits:
    """The API's ceilings (see the module docstring for how to change them).

    Attributes:
        body_bytes: largest request body.
        nesting_depth: deepest nesting of lists and mappings in a JSON or YAML body.
        list_limit_max: largest ``?limit=`` of ``/api/jobs``, and what it lists without one.
        command_items: most argv strings in ``command``.
        command_chars: most characters in ``command``, all argv strings together.
        model_chars: longest ``model``.
        job_type_chars: longest ``job_type``.
        checkpoint_dir_chars: longest ``checkpoint_dir`` (Linux's ``PATH_MAX``).
        flavors: most entries in ``flavors``.
        env_entries: most variables in ``env``.
        env_key_chars: longest variable name in ``env``.
        env_value_chars: longest variable value in ``env``.
    """

    body_bytes: Annotated[int, Field(ge=1024)] = 1_048_576
    nesting_depth: Annotated[int, Field(ge=4, le=100)] = 32
    list_limit_max: Annotated[int, Field(ge=1)] = 10_000
    command_items: Annotated[int, Field(ge=1)] = 256
    command_chars: Annotated[int, Field(ge=1)] = 8192
    model_chars: Annotated[int, Field(ge=1)] = 256
    job_type_chars: Annotated[int, Field(ge=1)] = 256
    checkpoint_dir_chars: Annotated[int, Field(ge=1)] = 4096
    flavors: Annotated[int, Field(ge=1)] = 16
    env_entries: Annotated[int, Field(ge=0)] = 128
    env_key_chars: Annotated[int, Field(ge=1)] = 256
    env_value_chars: Annotated[int, Field(ge=0)] = 32_768

    def violations(self, req: JobRequest) -> list[str]:
        """One line per field of ``req`` that exceeds a ceiling (empty when it fits)."""
        out: list[str] = []
        argv = [req.command] if isinstance(req.command, str) else req.command
        if len(argv) > self.command_items:
            out.append(f"command: {len(argv)} argv strings; at most {self.command_items}")
        if sum(map(len, argv)) > self.command_chars:
            out.append(f"command: longer than {self.command_chars} characters")
        for name, value, most in (("model", req.model, self.model_chars),
                                  ("job_type", req.job_type, self.job_type_chars),
                                  ("checkpoint_dir", req.checkpoint_dir,
                                   self.checkpoint_dir_chars)):
            if value is not None and len(value) > most:
                out.append(f"{name}: longer than {most} characters")
        if len(req.flavors) > self.flavors:
            out.append(f"flavors: {len(req.flavors)} entries; at most {self.flavors}")
        if len(req.env) > self.env_entries:
            out.append(f"env: {len(req.env)} variables; at most {self.env_entries}")
        if any(len(k) > self.env_key_chars for k in req.env):
            out.append(f"env: a variable name longer than {self.env_key_chars} characters")
        if any(len(v) > self.env_value_chars for v in req.env.values()):
            out.append(f"env: a value longer than {self.env_value_chars} characters")
        return out


DEFAULT_LIMITS = ApiLimits()


def parse_body(text: str, fmt: str, limits: ApiLimits = DEFAULT_LIMITS) -> Any:
    """Parse a JSON (``fmt="json"``) or YAML request body within ``limits.nesting_depth``.

    Raises:
        BodyError: malformed text, nesting deeper than the limit, or YAML anchors/aliases
            (which can make a small document expand into a huge one).
    """
    if fmt == "json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise BodyError(f"request body is not valid JSON: {e}") from None
        except RecursionError:
            raise BodyError(f"request body nests deeper than {limits.nesting_depth} "
                            "levels") from None
        if _depth(raw, limits.nesting_depth) > limits.nesting_depth:
            raise BodyError(f"request body nests deeper than {limits.nesting_depth} levels")
        return raw
    loader = _BoundedLoader(text)
    loader.max_depth = limits.nesting_depth
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise BodyError(f"request body is not valid YAML: {e}") from None
    finally:
        loader.dispose()


def _depth(value: Any, stop: int) -> int:
    """How deeply ``value`` nests lists and dicts, counted without recursion up to ``stop + 1``."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            if deepest > stop:
                return deepest
            todo.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing aliases and nesting deeper than ``max_depth``.

    PyYAML composes nodes recursively, so a document nested thousands deep would end in a
    RecursionError; here it ends in a ``ComposerError`` at ``max_depth``.
    """

    max_depth = 32
    _level = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases are not allowed in a job request",
                event.start_mark)
        self._level += 1
        try:
            if self._level > self.max_depth:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {self.max_depth} levels", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._level -= 1


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 unread.

    A declared ``Content-Length`` over the limit is refused before any body byte is read; a
    chunked body is counted as it arrives and refused as soon as it passes the limit. A body
    within the limit is handed on to the app unchanged.
    """

    def __init__(self, app: Asgi, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _answer(send, 400, "Content-Length is not a number")
                return
            if int(declared) > self.max_bytes:
                await _answer(send, 413, self._too_large())
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _answer(send, 413, self._too_large())
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _too_large(self) -> str:
        return (f"request body is larger than {self.max_bytes} bytes (limits.body_bytes in "
                "tessera-live.yaml)")


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
