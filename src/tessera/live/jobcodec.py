"""Stored jobs as JSON, generated from the dataclasses' own fields.

A job row's ``spec_json`` is :class:`~tessera.live.livejob.LiveJob` walked field by field with
:func:`dataclasses.fields` and the fields' type hints: a nested dataclass becomes an object, a
tuple a list, a :class:`~tessera.model.gpus.GpuFlavor` its short name (the store is an edge: the
name is resolved back into the catalog's flavor when the row is read). A field added to
``JobSpec``, ``ElasticRange``, ``ThreeDParallel`` or ``LiveJob`` is therefore stored and read
back without touching this module, and a row written before the field existed reads it as its
default. The walk knows only the types these dataclasses use (dataclasses, ``X | None``,
``tuple``, ``dict`` with string keys, ``NewType``, enums, ``str``/``int``/``float``/``bool``)
and refuses any other with a one-line error, so a new kind of field cannot be stored wrongly in
silence.

Why a walk and not a pydantic ``TypeAdapter`` over the dataclasses: the core's dataclasses stay
free of pydantic annotations (a flavor is a catalog object that is stored as its *name*, which
a ``TypeAdapter`` would need told on the core's own type), and decoding calls the dataclasses'
constructors, so every check of ``__post_init__`` runs on what the store gives back.

The stored shape::

    {"format": 2, "spec": {"job_id": ..., "flavors": ["A100-80GB"], "elastic": {...}, ...},
     "name": ..., "argv": [...], "env": {"NAME": "value"}, ...}

``env`` stays a top-level object (a field marked ``metadata={"json": "mapping"}``): the store
empties it in SQL for lean reads (:mod:`tessera.live.store`). Rows without ``"format"`` were
written before this module, by the hand-written encoder; :mod:`tessera.live.jobcodec_v1` reads
them, so a restart after an upgrade loses nothing.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from tessera.errors import SpecError, TesseraError
from tessera.live import jobcodec_v1
from tessera.model.gpus import GpuFlavor, resolve_flavor

T = TypeVar("T")

#: The shape :func:`encode_job` writes (rows without the key are format 1).
FORMAT = 2
#: A field's ``metadata`` asking for a tuple of ``(key, value)`` pairs stored as an object.
MAPPING = types.MappingProxyType({"json": "mapping"})


class StoredJobError(SpecError):
    """A stored job that does not decode into its dataclasses (names the field and why)."""


def to_plain(value: object) -> Any:
    """``value`` as JSON-ready data (dicts, lists, strings, numbers, booleans, ``None``)."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, GpuFlavor):
        return value.short
    if isinstance(value, tuple | list):
        return [to_plain(v) for v in value]
    cls = type(value)
    plan = _FIELDS[cls] if cls in _FIELDS else _fields_of(cls)
    if plan is not None:
        out: dict[str, Any] = {}
        for name, mapping, default in plan:
            v = getattr(value, name)
            if default is not _REQUIRED and _same(v, default):
                continue  # the decoder fills a missing field with its default
            out[name] = {k: to_plain(x) for k, x in v} if mapping else to_plain(v)
        return out
    if isinstance(value, enum.Enum):
        return to_plain(value.value)
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    raise StoredJobError(f"cannot store a {type(value).__name__}: no JSON form is defined")


_SCALARS = frozenset({str, int, float, bool, type(None)})
_REQUIRED = object()
"""The default of a field that has none (always stored)."""
_FIELDS: dict[type, tuple[tuple[str, bool, Any], ...] | None] = {}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _REQUIRED


def _same(value: Any, default: Any) -> bool:
    """``value`` is its field's default, of the same type (``1`` is not ``True``, ``1.0`` is
    stored where the default is ``1``), so leaving it out loses nothing."""
    return type(value) is type(default) and bool(value == default)


def _fields_of(cls: type) -> tuple[tuple[str, bool, Any], ...] | None:
    """A dataclass's fields as ``(name, stored as a mapping, default)``, ``None`` for other
    types (kept in ``_FIELDS``). A field that holds its default is left out of the row: rows
    stay as small as the hand-written format's (the per-queue byte caps count them). So a
    field's default is part of the stored format: changing one needs a new ``FORMAT``."""
    plan = None
    if dataclasses.is_dataclass(cls):
        plan = tuple((f.name, f.metadata.get("json") == "mapping", _default(f))
                     for f in dataclasses.fields(cls))
    _FIELDS[cls] = plan
    return plan


def from_plain(tp: Any, data: Any, where: str = "job") -> Any:
    """Rebuild a value of type ``tp`` from :func:`to_plain`'s data.

    Raises:
        StoredJobError: data that does not fit the type, naming the field (``where`` and the
            path below it, e.g. ``job.spec.num_gpus``).
    """
    try:
        return _decoder(tp)(data)
    except _Bad as e:
        raise StoredJobError(f"stored {where}{''.join(reversed(e.path))}: {e}") from None
    except TesseraError as e:
        if isinstance(e, StoredJobError):
            raise
        raise StoredJobError(f"stored {where}: {e}") from None


def encode_job(job: object) -> str:
    """The JSON text a job row stores (format 2): ``job`` (a ``LiveJob``) walked."""
    return json.dumps({"format": FORMAT, **to_plain(job)})


def decode_job(text: str, cls: type[T]) -> T:
    """A job of class ``cls`` (``LiveJob``, which calls this) from its row's JSON, of either
    format.

    Raises:
        StoredJobError: a row that does not decode (names the field).
    """
    d = json.loads(text)
    if not isinstance(d, dict):
        raise _fail("job", "an object", d)
    version = d.pop("format", 1)
    if version == 1:
        try:
            return jobcodec_v1.decode(d, cls)
        except SpecError as e:
            raise StoredJobError(f"stored job (format 1): {e}") from None
    if version != FORMAT:
        raise StoredJobError(f"stored job format {version!r} is newer than this tessera "
                             f"(reads formats 1-{FORMAT}); upgrade tessera")
    job: T = from_plain(cls, d)
    return job


# -- decoders, one per type, built once ------------------------------------------------------
#
# A decoder takes the data only; a failure raises _Bad, and each level it passes through adds
# its step of the path (".spec", "[2]"), so a row that decodes builds no path strings at all.

Decoder = Callable[[Any], Any]


class _Bad(Exception):
    """Data that does not fit its type; ``path`` collects the field names, innermost first."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str] = []


def _fail(where: str, want: str, data: Any) -> StoredJobError:
    return StoredJobError(f"stored {where}: {_expected(want, data)}")


def _expected(want: str, data: Any) -> str:
    return f"expected {want}, got {type(data).__name__} {str(data)[:40]!r}"


def _step(step: str, dec: Decoder, d: Any) -> Any:
    """``dec(d)``, adding ``step`` to the path of a failure."""
    try:
        return dec(d)
    except _Bad as e:
        e.path.append(step)
        raise


@cache
def _decoder(tp: Any) -> Decoder:
    """The function that decodes data of type ``tp`` (refuses a type it does not know)."""
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:  # a NewType: decode as its base type, keep the value
        return _decoder(supertype)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise StoredJobError(f"cannot decode the union {tp!r}: only X | None is supported")
        decode_inner = _decoder(inner[0])
        return lambda d: None if d is None else decode_inner(d)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            return lambda d: tuple(_step(f"[{i}]", item, x) for i, x in enumerate(_list(d)))
        items = [_decoder(a) for a in args]
        return lambda d: _fixed_tuple(items, d)
    if origin is dict:
        value = _decoder(args[1])
        return lambda d: {str(k): _step(f".{k}", value, v) for k, v in _dict(d).items()}
    if tp is GpuFlavor:
        return lambda d: resolve_flavor(_scalar(str, d))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda d: tp(d)
    if tp in (str, int, float, bool):
        return lambda d: _scalar(tp, d)
    raise StoredJobError(f"cannot decode values of type {tp!r}")


def _dataclass_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    required = [f.name for f in fields if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    parts = [(f.name, _decoder(hints[f.name]), f.metadata.get("json") == "mapping")
             for f in fields]

    def decode(d: Any) -> Any:
        d = _dict(d)
        if len(d) > len(names) or not d.keys() <= names:
            unknown = sorted(set(d) - names)
            raise _Bad(f"unknown field(s) {', '.join(unknown)} for {cls.__name__} (written "
                       "by a newer tessera?)")
        missing = [n for n in required if n not in d]
        if missing:
            raise _Bad(f"{cls.__name__} lacks {', '.join(missing)}")
        kwargs = {}
        for name, dec, mapping in parts:
            if name in d:  # a field missing from an older row keeps its default
                raw = d[name]
                try:
                    if mapping:
                        raw = [[k, v] for k, v in sorted(_dict(raw).items())]
                    kwargs[name] = dec(raw)
                except _Bad as e:
                    e.path.append(f".{name}")
                    raise
        return cls(**kwargs)

    return decode


def _scalar(tp: type, d: Any) -> Any:
    if type(d) is tp:
        return d
    if tp is float and type(d) is int:
        return float(d)
    raise _Bad(_expected(tp.__name__, d))


def _list(d: Any) -> list[Any]:
    if type(d) is not list:
        raise _Bad(_expected("a list", d))
    return d


def _dict(d: Any) -> dict[str, Any]:
    if type(d) is not dict:
        raise _Bad(_expected("an object", d))
    return d


def _fixed_tuple(items: list[Decoder], d: Any) -> tuple[Any, ...]:
    values = _list(d)
    if len(values) != len(items):
        raise _Bad(_expected(f"{len(items)} items", d))
    return tuple(_step(f"[{i}]", dec, v) for i, (dec, v) in enumerate(zip(items, values,
                                                                          strict=True)))
