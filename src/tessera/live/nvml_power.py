"""GPU power limits and energy counters of live runs, through NVML (``nvidia-ml-py``).

A run may ask for a power limit (watts per GPU: the limit its simulation or Zeus chose). At
launch :meth:`GpuPower.begin` reads each of the run's GPUs' energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded) and, where a
limit is asked for and permitted, sets it; at the end :meth:`GpuPower.end` reads the counters
again (the run's energy is the difference, summed over its GPUs) and puts every limit back.
Whatever cannot be done is said, never silently skipped -- each call returns the lines for
the job's events:

* no ``nvidia-ml-py``, no driver or no GPU: the run runs unchanged, energy unknown
  (``power limit not set: NVML unavailable (…)``);
* a limit outside a GPU's range (``nvmlDeviceGetPowerManagementLimitConstraints``): refused
  for every GPU of the run, which runs at the limits it finds (a tenant's spec can never push a
  board outside what its maker allows);
* the service may not set limits (not root, or the driver forbids it): the run runs unchanged;
* a board without an energy counter (before Volta): energy unknown.

**A limit never outlives its run.** Before any limit is changed, the GPUs' previous limits
are written to a restore record in ``state_dir`` (one small JSON file per run, private to
the service); :meth:`GpuPower.end` restores them and deletes the record, and
:meth:`GpuPower.recover` -- called when the service starts -- restores every record a crash
left behind. A run that asks for no limit changes none.

NVML is imported lazily (``nvidia-ml-py`` is an optional dependency, the ``live`` extra); tests
inject a fake module with the same functions.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["GpuPower", "PowerEnd", "PowerStart", "load_nvml"]


def load_nvml() -> tuple[ModuleType | None, str]:
    """``(pynvml, "")`` initialised, or ``(None, why)`` when NVML cannot be used here."""
    try:
        import pynvml  # lazy: optional dependency (nvidia-ml-py, the live extra)
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            return None, "no GPU"
    except Exception as e:  # NVMLError (no driver, no device): the run goes on without
        return None, f"{type(e).__name__}: {e}"
    return pynvml, ""


@dataclass(frozen=True, slots=True)
class PowerStart:
    """What :meth:`GpuPower.begin` did: the limit set (``None``: none) and the event lines."""

    limit_w: float | None
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PowerEnd:
    """What :meth:`GpuPower.end` found: the run's energy (``None``: unknown) and the lines."""

    energy_j: float | None
    notes: tuple[str, ...]


def record_name(job_id: str, run: int) -> str:
    """The file name of a run's restore record: the job id with every character but letters,
    digits and ``-_.`` replaced by ``_`` (no path separator can reach the file system)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id)
    return f"{safe}.{run}.json"


class GpuPower:
    """Power limits and energy of the runs on this machine's GPUs (see the module docstring).

    Args:
        state_dir: where the restore records live (created private to the service).
        nvml: an initialised NVML module (tests: a fake); ``None`` loads ``pynvml`` lazily.
    """

    def __init__(self, state_dir: Path, nvml: Any = None) -> None:
        self.dir = state_dir
        self._nvml = nvml
        self._why = ""
        self._loaded = nvml is not None

    def nvml(self) -> Any:
        """The NVML module (loaded on first use), ``None`` where NVML cannot be used here."""
        return self._lib()

    def _lib(self) -> Any:
        if not self._loaded:
            self._nvml, self._why = load_nvml()
            self._loaded = True
        return self._nvml

    def _record(self, job_id: str, run: int) -> Path:
        return self.dir / record_name(job_id, run)

    def begin(self, job_id: str, run: int, gpus: Sequence[int],
              limit_w: float | None) -> PowerStart:
        """Read the energy counters of ``gpus`` (indices) and set ``limit_w`` where permitted.

        Never raises for a GPU's or NVML's sake: what could not be done is in the notes.
        """
        nv = self._lib()
        if nv is None or not gpus:
            why = self._why or "the run holds no GPU"
            return PowerStart(None, (f"power limit not set, energy not measured: NVML "
                                     f"unavailable ({why}); the run runs unchanged",)
                              if limit_w is not None else
                              (f"energy not measured: NVML unavailable ({why})",))
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in gpus]
        start_mj: dict[str, int | None] = {}
        notes: list[str] = []
        for i, h in zip(gpus, handles, strict=True):
            try:
                start_mj[str(i)] = int(nv.nvmlDeviceGetTotalEnergyConsumption(h))
            except Exception:  # NVMLError_NotSupported: a board without the counter
                start_mj[str(i)] = None
        if any(v is None for v in start_mj.values()):
            notes.append("energy not measured: a GPU of the run has no energy counter")
        record: dict[str, Any] = {"start_mj": start_mj, "previous_mw": {}}
        set_w = None
        if limit_w is not None:
            refused = self._refusal(nv, gpus, handles, limit_w)
            if refused is not None:
                notes.append(refused)
            else:
                previous = {str(i): int(nv.nvmlDeviceGetPowerManagementLimit(h))
                            for i, h in zip(gpus, handles, strict=True)}
                record["previous_mw"] = previous
                self._write(job_id, run, record)  # (before any change: a crash restores)
                try:
                    for h in handles:
                        nv.nvmlDeviceSetPowerManagementLimit(h, round(limit_w * 1000))
                    set_w = limit_w
                    notes.append(f"power limit {limit_w:g} W set on GPU "
                                 f"{','.join(map(str, gpus))}")
                except Exception as e:  # NVMLError_NoPermission: not root, or forbidden
                    self._restore(nv, previous)
                    record["previous_mw"] = {}
                    notes.append(f"power limit not set: the service may not set limits "
                                 f"({type(e).__name__}: {e}); the run runs unchanged")
        self._write(job_id, run, record)
        return PowerStart(set_w, tuple(notes))

    @staticmethod
    def _refusal(nv: Any, gpus: Sequence[int], handles: Sequence[Any],
                 limit_w: float) -> str | None:
        """Why ``limit_w`` may not be set on these GPUs (``None``: it may)."""
        if not math.isfinite(limit_w):
            return f"power limit {limit_w} W refused: not a number of watts"
        for i, h in zip(gpus, handles, strict=True):
            try:
                lo_mw, hi_mw = nv.nvmlDeviceGetPowerManagementLimitConstraints(h)
            except Exception as e:
                return (f"power limit not set: GPU {i}'s range is unknown "
                        f"({type(e).__name__}: {e}); the run runs unchanged")
            if not lo_mw <= limit_w * 1000 <= hi_mw:
                return (f"power limit {limit_w:g} W refused: outside GPU {i}'s range "
                        f"{lo_mw / 1000:g}-{hi_mw / 1000:g} W; the run runs unchanged")
        return None

    def end(self, job_id: str, run: int) -> PowerEnd:
        """The run's energy since :meth:`begin`, and its GPUs' limits put back."""
        path = self._record(job_id, run)
        if not path.exists():  # nothing was begun (or it was already ended)
            return PowerEnd(None, ())
        _previous, bad = _previous_of(path)
        if bad:  # torn or foreign: what the limits were is lost, and the run must hear it
            path.unlink(missing_ok=True)
            return PowerEnd(None, (f"power limit NOT restored, energy unknown: restore record "
                                   f"{path} unreadable ({bad}); check the GPUs' limits with "
                                   "nvidia-smi -q -d POWER",))
        record = json.loads(path.read_text())
        nv = self._lib()
        notes: list[str] = []
        energy_j: float | None = None
        if nv is not None:
            starts = record.get("start_mj", {})
            try:  # (the energy is a bonus: failing to read it must not skip the restore)
                energy_j = self._energy_j(nv, starts)
            except Exception as e:
                notes.append(f"energy unknown: NVML failed ({type(e).__name__}: {e})")
            if energy_j is not None and energy_j < 0:  # the counter counts from the
                energy_j = None  # driver's load: it was reloaded meanwhile
                notes.append("energy unknown: a GPU's energy counter went back during the "
                             "run (the driver was reloaded)")
            notes += self._restore(nv, record.get("previous_mw", {}))
        path.unlink(missing_ok=True)
        return PowerEnd(energy_j, tuple(notes))

    @staticmethod
    def _energy_j(nv: Any, starts: dict[str, int | None]) -> float | None:
        """Joules used on the GPUs since the counters ``starts`` (mJ per index) were read
        (``None``: a GPU has no counter)."""
        if not starts or any(v is None for v in starts.values()):
            return None
        total = 0
        for i, start in starts.items():
            h = nv.nvmlDeviceGetHandleByIndex(int(i))
            total += int(nv.nvmlDeviceGetTotalEnergyConsumption(h)) - int(start or 0)
        return total / 1000.0

    def recover(self) -> list[str]:
        """Restore the limits every leftover record holds (a crash between :meth:`begin` and
        :meth:`end`); returns what was done, one line per run."""
        if not self.dir.is_dir():
            return []
        out: list[str] = []
        for path in sorted(self.dir.glob("*.json")):
            previous, bad = _previous_of(path)
            if bad:  # a torn or foreign file: its GPUs' limits are unknown, say so
                out.append(f"{path.stem}: power limit NOT restored: restore record {path} "
                           f"unreadable ({bad}); check the GPUs' limits with nvidia-smi -q -d "
                           "POWER")
            nv = self._lib() if previous else None
            if nv is not None:
                done = self._restore(nv, previous)
                out.append(f"{path.stem}: " + "; ".join(done))
            path.unlink(missing_ok=True)
        return out

    @staticmethod
    def _restore(nv: Any, previous: dict[str, int]) -> list[str]:
        """Put back each GPU's previous limit where it differs now; a GPU that refuses is
        named (the record is still dropped: retrying cannot gain a permission)."""
        done, failed = [], []
        for i, mw in previous.items():
            try:
                h = nv.nvmlDeviceGetHandleByIndex(int(i))
                if int(nv.nvmlDeviceGetPowerManagementLimit(h)) != mw:
                    nv.nvmlDeviceSetPowerManagementLimit(h, mw)
                done.append(f"GPU {i} {mw / 1000:g} W")
            except Exception as e:
                failed.append(f"GPU {i} ({type(e).__name__}: {e})")
        out = [f"power limit restored: {', '.join(done)}"] if done else []
        if failed:
            out.append(f"power limit NOT restored on {', '.join(failed)}")
        return out

    def _write(self, job_id: str, run: int, record: dict[str, Any]) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._record(job_id, run)
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)  # (never write through a file planted in its place)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record))
        tmp.replace(path)


def _previous_of(path: Path) -> tuple[dict[str, int], str]:
    """The ``previous_mw`` of a restore record (GPU index -> milliwatts) and ``""``, or ``({},
    why)`` when the record is torn, not a regular file, or not what :meth:`GpuPower.begin`
    writes (a restore must never raise: the records after it still need theirs)."""
    try:
        if path.is_symlink() or not path.is_file():
            return {}, "not a regular file"
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return {}, f"{type(e).__name__}: {e}"
    previous = record.get("previous_mw", {}) if isinstance(record, dict) else None
    if not isinstance(previous, dict) or not all(
            isinstance(i, str) and i.isdigit() and type(mw) is int and mw > 0
            for i, mw in previous.items()):
        return {}, "not a restore record: previous_mw must map GPU indices to milliwatts"
    return previous, ""
