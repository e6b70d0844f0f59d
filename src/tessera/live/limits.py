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
                       read past the limit; a YAML body 64 KiB
 nesting        400    32 levels of JSON or YAML; YAML anchors and aliases are refused
 fields         422    see the attributes below
 ``?limit=``    422    1 .. 10,000 jobs on a page of ``/api/jobs`` (500 without it)
==============  =====  ===============================================================

The same section sets the default per-queue caps on what a tenant keeps stored
(``queue_stored_jobs``, ``queue_queued_jobs``, ``queue_stored_bytes``; answered 429, see
:mod:`tessera.live.totals`), which a queue may override.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Annotated, Any

import yaml
from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Message, Receive, Send], Awaitable[None]]


class BodyError(ValueError):
    """A request body that cannot be parsed within the limits (answered 400)."""


class BodyTooLarge(BodyError):
    """A body over a size limit of its format (answered 413)."""


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class ApiLimits:
    """The API's ceilings (see the module docstring for how to change them).

    Attributes:
        body_bytes: largest request body.
        yaml_bytes: largest YAML body (YAML costs about ten times JSON's time to parse, and a
            job file is a few hundred bytes).
        nesting_depth: deepest nesting of lists and mappings in a JSON or YAML body.
        list_limit_max: largest ``?limit=`` of ``/api/jobs`` (jobs on one page).
        list_page_jobs: jobs on a page of ``/api/jobs`` without ``?limit=``.
        command_items: most argv strings in ``command``.
        command_chars: most characters in ``command``, all argv strings together.
        model_chars: longest ``model``.
        job_type_chars: longest ``job_type``.
        checkpoint_dir_chars: longest ``checkpoint_dir`` (Linux's ``PATH_MAX``).
        flavors: most entries in ``flavors``.
        env_entries: most variables in ``env``.
        env_key_chars: longest variable name in ``env``.
        env_value_chars: longest variable value in ``env``.
        queue_stored_jobs: default ``max_stored_jobs`` of a queue (:mod:`tessera.live.totals`).
        queue_queued_jobs: default ``max_queued_jobs`` of a queue (unfinished jobs).
        queue_stored_bytes: default ``max_stored_bytes`` of a queue (its jobs' stored specs).
    """

    body_bytes: Annotated[int, Field(ge=1024)] = 1_048_576
    yaml_bytes: Annotated[int, Field(ge=1024)] = 65_536
    nesting_depth: Annotated[int, Field(ge=4, le=100)] = 32
    list_limit_max: Annotated[int, Field(ge=1)] = 10_000
    list_page_jobs: Annotated[int, Field(ge=1)] = 500
    command_items: Annotated[int, Field(ge=1)] = 256
    command_chars: Annotated[int, Field(ge=1)] = 8192
    model_chars: Annotated[int, Field(ge=1)] = 256
    job_type_chars: Annotated[int, Field(ge=1)] = 256
    checkpoint_dir_chars: Annotated[int, Field(ge=1)] = 4096
    flavors: Annotated[int, Field(ge=1)] = 16
    env_entries: Annotated[int, Field(ge=0)] = 128
    env_key_chars: Annotated[int, Field(ge=1)] = 256
    env_value_chars: Annotated[int, Field(ge=0)] = 32_768
    queue_stored_jobs: Annotated[int, Field(ge=1)] = 10_000
    queue_queued_jobs: Annotated[int, Field(ge=1)] = 1_000
    queue_stored_bytes: Annotated[int, Field(ge=1024)] = 256 * 1024 * 1024

    def violations(self, raw: Mapping[str, Any]) -> list[str]:
        """One line per field of a parsed request that exceeds a ceiling (empty when it fits).

        Checked on the raw mapping, before the fields are validated, so an oversized field
        costs no validation work (a list of 200,000 flavors is refused before any is looked
        up); fields of the wrong type are left to the validation that follows.
        """
        out: list[str] = []
        command = raw.get("command")
        argv = [command] if isinstance(command, str) else command
        if isinstance(argv, list):
            if len(argv) > self.command_items:
                out.append(f"command: {len(argv)} argv strings; at most {self.command_items}")
            if sum(len(a) for a in argv if isinstance(a, str)) > self.command_chars:
                out.append(f"command: longer than {self.command_chars} characters")
        for name, most in (("model", self.model_chars), ("job_type", self.job_type_chars),
                           ("checkpoint_dir", self.checkpoint_dir_chars)):
            value = raw.get(name)
            if isinstance(value, str) and len(value) > most:
                out.append(f"{name}: longer than {most} characters")
        flavors = raw.get("flavors")
        if isinstance(flavors, list) and len(flavors) > self.flavors:
            out.append(f"flavors: {len(flavors)} entries; at most {self.flavors}")
        env = raw.get("env")
        if isinstance(env, dict):
            if len(env) > self.env_entries:
                out.append(f"env: {len(env)} variables; at most {self.env_entries}")
            if any(isinstance(k, str) and len(k) > self.env_key_chars for k in env):
                out.append(f"env: a variable name longer than {self.env_key_chars} characters")
            if any(isinstance(v, str) and len(v) > self.env_value_chars for v in env.values()):
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
    if len(text) > limits.yaml_bytes:
        raise BodyTooLarge(f"a YAML request body is limited to {limits.yaml_bytes} bytes "
                           "(limits.yaml_bytes in tessera-live.yaml); send JSON")
    try:
        _check_yaml_events(text, limits.nesting_depth)
        return yaml.load(text, Loader=_LOADER)  # a safe loader: plain data only
    except yaml.YAMLError as e:
        why = " ".join(str(e).split())  # PyYAML's messages span lines
        if "maximum nesting depth" in why:  # libyaml's own limit, met while looking ahead
            why = f"nested deeper than {limits.nesting_depth} levels"
        raise BodyError(f"request body is not valid YAML: {why}") from None


#: libyaml's safe loader when PyYAML was built with it (about ten times faster), else PyYAML's.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_yaml_events(text: str, most: int) -> None:
    """Walk the YAML event stream (no recursion, nothing built) before anything is loaded.

    Raises:
        BodyError: nesting deeper than ``most``, or an anchor or alias (a few bytes of aliases
            can stand for an exponentially large document).
    """
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise BodyError("request body is not valid YAML: anchors and aliases are not "
                            "allowed in a job request")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > most:
                raise BodyError(f"request body is not valid YAML: nested deeper than {most} "
                                "levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


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
            # Length first: int() of a 5,000-digit value raises (Python's digit limit).
            if len(declared) > 18 or int(declared) > self.max_bytes:
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
        await self.app(scope, replay_body(b"".join(chunks), receive), send)

    def _too_large(self) -> str:
        return (f"request body is larger than {self.max_bytes} bytes (limits.body_bytes in "
                "tessera-live.yaml)")


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` (already read) once, then the client's own messages
    (the app downstream reads the request as if nobody had)."""
    given = False

    async def again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
