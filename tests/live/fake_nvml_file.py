"""A fake ``pynvml`` whose boards live in a JSON file, so the Ray rank hosts (other processes)
and a test share them. Test-only: loaded by path through the rank host's seam
(``TESSERA_TEST_NVML_MODULE``, :mod:`tessera.live.executors.ray.rank_power`); the state file is
named by ``TESSERA_TEST_NVML_STATE``.

State: ``{"absent": bool, "limit_mw": {gpu: mW}, "energy_mj": {gpu: mJ}, "sets": [[gpu, mW]]}``;
the boards allow 100-300 W, and each energy read advances a board's counter by 5 J.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BURN_MJ = 5_000


class NVMLError(Exception):
    pass


def _path() -> Path:
    return Path(os.environ["TESSERA_TEST_NVML_STATE"])


def reset(path: Path, n: int = 2, absent: bool = False) -> None:
    """Write fresh boards (limit 250 W) to ``path`` (called by the test)."""
    path.write_text(json.dumps({"absent": absent,
                                "limit_mw": {str(i): 250_000 for i in range(n)},
                                "energy_mj": {str(i): 1_000_000 for i in range(n)},
                                "sets": []}))


def read(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


@contextmanager
def _state() -> Iterator[dict[str, Any]]:
    path = _path()
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read(path)
        yield state
        path.write_text(json.dumps(state))


def _call(fn: Callable[[dict[str, Any]], Any]) -> Any:
    with _state() as s:
        if s["absent"]:
            raise NVMLError("Driver Not Loaded")
        return fn(s)


def nvmlInit() -> None:
    _call(lambda s: None)


def nvmlDeviceGetCount() -> int:
    return int(_call(lambda s: len(s["limit_mw"])))


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    return int(i)


def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int:
    def burn(s: dict[str, Any]) -> int:
        s["energy_mj"][str(h)] += BURN_MJ
        return int(s["energy_mj"][str(h)])
    return int(_call(burn))


def nvmlDeviceGetPowerManagementLimitConstraints(h: int) -> tuple[int, int]:
    return 100_000, 300_000


def nvmlDeviceGetPowerManagementLimit(h: int) -> int:
    return int(_call(lambda s: s["limit_mw"][str(h)]))


def nvmlDeviceSetPowerManagementLimit(h: int, mw: int) -> None:
    def put(s: dict[str, Any]) -> None:
        assert 100_000 <= mw <= 300_000
        s["limit_mw"][str(h)] = int(mw)
        s["sets"].append([int(h), int(mw)])
    _call(put)
