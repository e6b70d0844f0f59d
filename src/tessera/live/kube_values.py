"""Kubernetes' value syntaxes that Kueue's objects use: quantities (``8``, ``"500m"``,
``"2Ki"``) and Go durations (``"24h0m0s"``), read and written exactly (decimal, no float
rounding), so a value read back from an export is the value exported."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from tessera.errors import SpecError

_SCALE = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
          "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
          "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10),
          "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
          "Pi": Decimal(2**50), "Ei": Decimal(2**60)}


def parse_quantity(owner: str, path: str, value: object) -> Decimal:
    """A Kubernetes quantity (``8``, ``"500m"``, ``"1.5"``, ``"2Ki"``, ``"1e3"``) as a number.

    Raises:
        SpecError: naming ``owner`` and ``path`` for anything else.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(f"{owner}: {path}: not a quantity: {value!r}")
    text = str(value).strip()
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?",
                     text)
    if m is None:
        raise SpecError(f"{owner}: {path}: not a Kubernetes quantity: {value!r}")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        raise SpecError(f"{owner}: {path}: not a Kubernetes quantity: {value!r}") from None
    return number * _SCALE[m.group(2) or ""]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_UNIT_S = {"h": Decimal(3600), "m": Decimal(60), "s": Decimal(1), "ms": Decimal("1e-3"),
           "us": Decimal("1e-6"), "µs": Decimal("1e-6"), "ns": Decimal("1e-9")}


def parse_duration_s(owner: str, path: str, value: object) -> float:
    """A Go duration (``"168h0m0s"``, ``"90m"``, ``"1.5s"``) in seconds."""
    text = str(value)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise SpecError(f"{owner}: {path}: not a duration like '24h0m0s': {value!r}")
    return float(sum(Decimal(n) * _UNIT_S[u] for n, u in parts))


def format_duration(seconds: float) -> str:
    """Seconds as Go writes a duration: ``86400`` -> ``"24h0m0s"``, ``90`` -> ``"1m30s"``."""
    total = Decimal(repr(seconds))
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    s_text = format(s.normalize(), "f") if s else "0"
    if h:
        return f"{int(h)}h{int(m)}m{s_text}s"
    if m:
        return f"{int(m)}m{s_text}s"
    return f"{s_text}s"
