"""Power limits and energy of Ray ranks, on the node that runs them (issue 34, part 5).

The service cannot reach a Ray node's GPUs, so each node's rank host
(:class:`~tessera.live.executors.ray.worker.RankHost`) does what
:class:`~tessera.live.nvml_power.GpuPower` does for the local executor, rank by rank, on the GPUs
Ray gave that rank (its ``CUDA_VISIBLE_DEVICES``, one id of its bundle):

* **at the rank's start** (:meth:`RankPower.begin`, before its command starts) the GPUs'
  energy counters are read and, where the service asked for a limit, it is set -- after the
  previous limits are written to the rank's **restore record** on this node;
* **at the rank's end**, whatever ended it -- exit, failure, a stop (cancel, preemption), the
  host's ``forget`` -- (:meth:`RankPower.end`, from the host's exit watcher) the counters are
  read again and the limits restored; the energy (joules) and every note go into the rank's
  exit record (``energy_j``, ``power``), which the service reads back
  (:func:`tessera.live.run_power_ray.collect`);
* **at the host's own start** (:meth:`RankPower.recover`): a host that died (``ray.kill``, a
  crash) took its ranks with it, so every record on the node is a leftover: its limits are put
  back and the notes are left in Ray's KV under ``powerleft:<job>:<run>:<rank>`` for the
  service to turn into events when it releases the run.

**Where the records live.** Ray nodes share no filesystem, so each node keeps its own, under
the service's state root on that node (the runs dir's parent, the same path on every node):
``<state>/ray-power/<node id>/<job>.<run>.<rank>.json``, folders ``0700``, files ``0600``, owned by
the rank host's user. A folder that exists but is a symlink, another user's or open to others
is refused (the rank runs unchanged, and :meth:`RankPower.recover` reads no record there): on a
node where ``<state>`` lies in a shared place such as ``/tmp``, a job could otherwise plant it
and forge the limits a restore sets. The node id keeps several Ray nodes on one machine (or one
shared work root) apart: a host recovers only its own node's records. Nobody but the host's
user (and root) can read or write them; a job's command runs as the run-as user, in another
process tree, and never sees the folder's path.

**A rank holds its GPUs alone.** Ray books each GPU of a placement-group bundle to that bundle
only, and the service asks for a limit only for a run that shares no GPU with another run
(:mod:`tessera.live.run_power_ray`). The host checks it once more: a rank whose GPU another run's
rank on this node still measures, or whose ``CUDA_VISIBLE_DEVICES`` is not a list of indices
(a MIG slice or a UUID), runs unchanged, and its notes say why.

**Which NVML.** ``nvidia-ml-py`` on the node, loaded afresh (``nvmlInit``) at every start, so a
driver that comes up later is used. Tests point :data:`FAKE_NVML_VAR` in the environment of the
Ray cluster's processes at a fake module's file; it is read from the **host's own** process
environment only (set by whoever starts Ray: the service's operator), never from a job's --
jobs cannot reach the host's environment, and the request refuses ``TESSERA_*`` variables in
a job's ``env`` anyway (``docs/security.md``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import stat
from pathlib import Path
from types import ModuleType
from typing import Any

from tessera.live.executors.logs import _mkdir_private, ensure_runs_dir
from tessera.live.nvml_power import GpuPower, load_nvml, record_name

__all__ = ["FAKE_NVML_VAR", "RankPower", "leftover_key", "node_nvml"]

#: Test-only seam: the path of a Python file to use as ``pynvml`` on this node (see above).
FAKE_NVML_VAR = "TESSERA_TEST_NVML_MODULE"

RankKey = tuple[str, int, int]


def leftover_key(job_id: str, run: int, rank: int) -> str:
    """The KV key of what a host restored for a rank a dead host left capped."""
    return f"powerleft:{job_id}:{run}:{rank}"


def node_nvml() -> tuple[Any, str]:
    """``(pynvml, "")`` initialised, or ``(None, why)`` where this node has no usable NVML."""
    fake = os.environ.get(FAKE_NVML_VAR)
    if not fake:
        return load_nvml()
    try:
        spec = importlib.util.spec_from_file_location("tessera_fake_nvml", fake)
        if spec is None or spec.loader is None:
            return None, f"{FAKE_NVML_VAR}={fake} is not a Python file"
        mod: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.nvmlInit()
        if mod.nvmlDeviceGetCount() < 1:
            return None, "no GPU"
    except Exception as e:  # the fake says "no driver" the way NVML does
        return None, f"{type(e).__name__}: {e}"
    return mod, ""


def _gpu_ids(visible_devices: str) -> list[int] | None:
    parts = [p.strip() for p in visible_devices.split(",") if p.strip()]
    return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None


class RankPower:
    """The power limits and energy of one node's ranks (see the module docstring).

    Args:
        root: the state root's ``ray-power`` folder on this node (``""``: no records, every rank
            runs unchanged -- a host made without one, as tests of other parts do).
        node_id: this Ray node's id (the records' subfolder).
    """

    def __init__(self, root: str, node_id: str) -> None:
        self.dir = Path(root) / node_id if root else None
        self._gpus: dict[int, RankKey] = {}  # GPU -> the rank measuring it on this node

    @staticmethod
    def _stem(key: RankKey) -> tuple[str, int]:
        """The :class:`GpuPower` record name of a rank: ``<job>.<run>`` and the rank."""
        return f"{key[0]}.{key[1]}", key[2]

    def begin(self, key: RankKey, visible_devices: str, limit_w: float | None,
              node: str) -> list[str]:
        """Read the counters of the rank's GPUs and set ``limit_w`` where permitted; returns
        the notes (never raises: what cannot be done runs the rank unchanged)."""
        unchanged = "the rank runs unchanged" if limit_w is not None else "energy not measured"
        if not visible_devices.strip():  # a rank without GPUs: nothing to cap or measure
            return ([f"power limit {limit_w:g} W not set: the rank holds no GPU"]
                    if limit_w is not None else [])
        gpus = _gpu_ids(visible_devices)
        if self.dir is None:
            return [f"power not handled: this rank host keeps no restore records; {unchanged}"]
        if gpus is None:
            return [f"power limit not set, energy not measured: the rank's GPUs "
                    f"{visible_devices!r} are not NVML indices; {unchanged}"]
        taken = [(g, self._gpus[g]) for g in gpus
                 if g in self._gpus and self._gpus[g][:2] != key[:2]]
        if taken:
            g, other = taken[0]
            return [f"power limit not set, energy not measured: GPU {g} on node {node} is "
                    f"also used by run {other[1]} of {other[0]}; {unchanged}"]
        try:  # before NVML: a folder someone else can write could hold forged records
            ensure_runs_dir(self.dir.parent)  # ray-power: 0700, ours, not a symlink
            _mkdir_private(self.dir)
        except OSError as e:
            return [f"power limit not set, energy not measured: the restore records' folder "
                    f"is not private to the rank host ({e}); {unchanged}"]
        nv, why = node_nvml()
        if nv is None:  # nothing asked but energy, on a node without GPUs NVML sees: no news
            return [f"power limit not set, energy not measured: NVML unavailable on node "
                    f"{node} ({why}); {unchanged}"] if limit_w is not None else []
        try:
            count = int(nv.nvmlDeviceGetCount())
            missing = [g for g in gpus if g >= count]
            if missing:
                return [f"power limit not set, energy not measured: GPU {missing[0]} is not "
                        f"among node {node}'s {count} NVML GPUs; {unchanged}"]
            job_run, rank = self._stem(key)
            started = GpuPower(self.dir, nv).begin(job_run, rank, gpus, limit_w)
        except Exception as e:  # an NVML call GpuPower does not guard (a handle)
            return [f"power limit not set, energy not measured: NVML failed on node {node} "
                    f"({type(e).__name__}: {e}); {unchanged}"]
        for g in gpus:
            self._gpus[g] = key
        return [f"{n} (node {node})" if n.startswith("power limit") and " set on " in n
                else n for n in started.notes]

    def end(self, key: RankKey) -> tuple[float | None, list[str]]:
        """The rank's energy (J, ``None``: unknown) and its GPUs' limits put back."""
        for g in [g for g, k in self._gpus.items() if k == key]:
            del self._gpus[g]
        if self.dir is None:
            return None, []
        job_run, rank = self._stem(key)
        if not (self.dir / record_name(job_run, rank)).exists():
            return None, []
        nv, why = node_nvml()
        try:
            done = GpuPower(self.dir, nv if nv is not None else _Absent(why)).end(job_run, rank)
        except Exception as e:
            return None, [f"power limit NOT restored, energy unknown: NVML failed "
                          f"({type(e).__name__}: {e}); the node's next rank host retries"]
        return done.energy_j, list(done.notes)

    def recover(self) -> dict[RankKey, list[str]]:
        """Restore every record on this node (a dead host's ranks died with it); returns the
        notes per rank."""
        if self.dir is None or not self.dir.is_dir() or not any(self.dir.glob("*.json")):
            return {}
        if not (_private(self.dir.parent) and _private(self.dir)):
            return {}  # records anyone else could write are not ours to act on (begin says so)
        nv, why = node_nvml()
        out: dict[RankKey, list[str]] = {}
        if nv is None:
            for path in sorted(self.dir.glob("*.json")):
                key = _key_of(path.stem)
                if key is not None:
                    out[key] = [f"power limit NOT restored: NVML unavailable ({why}); the "
                                "record stays for the node's next rank host"]
            return out
        for line in GpuPower(self.dir, nv).recover():
            stem, _, what = line.partition(": ")
            key = _key_of(stem)
            if key is not None and what:
                out[key] = [f"{what} (left by a rank host that died)"]
        return out


def _private(folder: Path) -> bool:
    """Whether ``folder`` is a directory (not a symlink) of this process's user, closed to
    group and others."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o077)


def _key_of(stem: str) -> RankKey | None:
    """``(job, run, rank)`` of a record name ``<job>.<run>.<rank>`` (``None``: not one)."""
    with contextlib.suppress(ValueError):
        job_run, _, rank = stem.rpartition(".")
        job, _, run = job_run.rpartition(".")
        if job:
            return job, int(run), int(rank)
    return None


class _Absent:
    """Stands in for NVML when it vanished between a rank's start and end: every call fails,
    so :class:`GpuPower` keeps nothing it cannot read (the energy is unknown)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __getattr__(self, name: str) -> Any:
        def fail(*_a: Any) -> Any:
            raise RuntimeError(f"NVML unavailable ({self.why})")
        return fail
