"""A fake ``pynvml`` for ``benchmarks/gpu_power_check.py``'s tests: put this folder first on
``PYTHONPATH`` and the script (and the crash child it starts) imports it instead of
``nvidia-ml-py``. Its boards live in the JSON file named by ``FAKE_PYNVML_STATE``, so every
process and thread sees the same boards.

A board allows 100-300 W (limit 250 W) and draws ``min(draw_mw, limit) * over`` milliwatts;
its energy counter integrates that draw, times ``skew``, over wall time. Faults, set in the
state (which ``tests/live/test_gpu_power_check.py`` writes): ``import_error`` (as if
``nvidia-ml-py`` were absent), ``absent`` (no driver), ``may_set: false`` (not root),
``fail_set_to_mw`` (setting that value fails: a restore that fails), ``counters: false`` (no
energy counter).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LO_MW, HI_MW = 100_000, 300_000


def _path() -> Path:
    return Path(os.environ["FAKE_PYNVML_STATE"])


def read(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


if read(_path()).get("import_error"):
    raise ImportError("No module named 'pynvml' (fake)")


class NVMLError(Exception):
    pass


def _draw_mw(s: dict[str, Any], gpu: str) -> float:
    return float(min(s["draw_mw"], s["limit_mw"][gpu]) * s["over"])


def _call(fn: Callable[[dict[str, Any]], Any]) -> Any:
    """``fn(state)`` under a lock, after the counters advanced to now."""
    path = _path()
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        s = read(path)
        if s["absent"]:
            raise NVMLError("Driver Not Loaded")
        now = time.time()
        for gpu in s["energy_mj"]:
            s["energy_mj"][gpu] += _draw_mw(s, gpu) * (now - s["t_s"]) * s["skew"]
        s["t_s"] = now
        out = fn(s)
        path.write_text(json.dumps(s))
        return out


def nvmlInit() -> None:
    _call(lambda s: None)


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return int(_call(lambda s: len(s["limit_mw"])))


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    return int(i)


def nvmlDeviceGetName(h: int) -> str:
    return "Fake GPU 80GB"


def nvmlDeviceGetPowerManagementLimitConstraints(h: int) -> tuple[int, int]:
    return LO_MW, HI_MW


def nvmlDeviceGetPowerManagementLimit(h: int) -> int:
    return int(_call(lambda s: s["limit_mw"][str(h)]))


def nvmlDeviceSetPowerManagementLimit(h: int, mw: int) -> None:
    def put(s: dict[str, Any]) -> None:
        if not s["may_set"]:
            raise NVMLError("Insufficient Permissions")
        if mw == s["fail_set_to_mw"]:
            raise NVMLError("Unknown Error")
        if not LO_MW <= mw <= HI_MW:
            raise NVMLError("Invalid Argument")
        s["limit_mw"][str(h)] = int(mw)
        s["sets"].append([int(h), int(mw)])
    _call(put)


def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int:
    def energy(s: dict[str, Any]) -> int:
        if not s["counters"]:
            raise NVMLError("Not Supported")
        return int(s["energy_mj"][str(h)])
    return int(_call(energy))


def nvmlDeviceGetPowerUsage(h: int) -> int:
    return int(_call(lambda s: _draw_mw(s, str(h))))
