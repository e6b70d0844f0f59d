"""Kubernetes-like quantities for CPUs and host memory, parsed at the edge.

Users write what they would write in a pod spec: ``cpus: 1.5`` or ``cpus: 1500m``, and
``memory: 16Gi``, ``512Mi``, ``64G`` or a plain number of GiB (``memory: 12``). Inside
Tessera every amount is a float: CPU cores, and host memory in GiB (``mem_gib``). Anything
else -- a negative amount, NaN, infinity, a unit that is not one of the table below, a
boolean -- is a :class:`~tessera.errors.SpecError` naming the field and the value, so a typo
never becomes a silent zero.

==========  =====================================  ===================
suffix      meaning                                in GiB
==========  =====================================  ===================
(none)      GiB (a bare number)                    x
``Ki``      kibibytes                              x / 2**20
``Mi``      mebibytes                              x / 2**10
``Gi``      gibibytes                              x
``Ti``      tebibytes                              x * 2**10
``K``       kilobytes (10**3 bytes)                x * 1e3 / 2**30
``M``       megabytes                              x * 1e6 / 2**30
``G``       gigabytes                              x * 1e9 / 2**30
``T``       terabytes                              x * 1e12 / 2**30
==========  =====================================  ===================
"""

from __future__ import annotations

import math
import re

from tessera.errors import SpecError

_GIB = float(2**30)
_MEMORY_UNITS: dict[str, float] = {
    "": 1.0, "Ki": 1024 / _GIB, "Mi": 2**20 / _GIB, "Gi": 1.0, "Ti": 1024.0,
    "K": 1e3 / _GIB, "M": 1e6 / _GIB, "G": 1e9 / _GIB, "T": 1e12 / _GIB,
}
_QUANTITY = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*")


def _finite(what: str, value: float, raw: object) -> float:
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise SpecError(f"{what} must be a finite amount >= 0, got {raw!r}")
    return value


def parse_cpus(raw: object, what: str = "cpus") -> float:
    """CPU cores from ``1.5``, ``"1.5"`` or ``"1500m"`` (millicores).

    Raises:
        SpecError: not a number or millicore string, negative, NaN or infinite.
    """
    if isinstance(raw, bool):
        raise SpecError(f"{what} must be a number of CPU cores, got {raw!r}")
    if isinstance(raw, (int, float)):
        return _finite(what, float(raw), raw)
    if isinstance(raw, str):
        m = _QUANTITY.fullmatch(raw)
        if m is not None and m.group(2) in ("", "m"):
            value = float(m.group(1)) / (1000.0 if m.group(2) == "m" else 1.0)
            return _finite(what, value, raw)
    raise SpecError(f"{what} must be a number of CPU cores such as 4, 1.5 or 1500m, "
                    f"got {raw!r}")


def parse_memory_gib(raw: object, what: str = "memory") -> float:
    """Host memory in GiB from a bare number (GiB) or a quantity such as ``"16Gi"``.

    Raises:
        SpecError: not a number or quantity, an unknown unit, negative, NaN or infinite.
    """
    if isinstance(raw, bool):
        raise SpecError(f"{what} must be an amount of memory, got {raw!r}")
    if isinstance(raw, (int, float)):
        return _finite(what, float(raw), raw)
    if isinstance(raw, str):
        m = _QUANTITY.fullmatch(raw)
        if m is not None and m.group(2) in _MEMORY_UNITS:
            return _finite(what, float(m.group(1)) * _MEMORY_UNITS[m.group(2)], raw)
    units = ", ".join(u for u in _MEMORY_UNITS if u)
    raise SpecError(f"{what} must be an amount of memory such as 16Gi, 512Mi or 12 (GiB); "
                    f"units: {units}; got {raw!r}")
