"""The service's side of live power: a run's power limit and energy, wired into its life.

:class:`~tessera.live.nvml_power.GpuPower` knows how to set, restore and measure through NVML;
this module decides *when* and *on which GPUs*, and writes what happened in the job's events
(kind ``power``):

* **at submission** (:meth:`RunPower.check_limit`) a ``power_limit_w`` outside the range of this
  machine's GPUs is refused with an error naming the value (where NVML answers here; the
  request itself already refused anything not a positive finite number of watts);
* **at service start** (:meth:`RunPower.recover`) every restore record a crash left is put
  back, before anything is launched, with an event on the job it belonged to. A run adopted
  across the restart goes on *without* its limit (safe: a board is never left capped by a run
  nobody watches) and its energy is then unknown;
* **at launch** (:meth:`RunPower.begin`) the energy counters are read and the limit set -- only
  on the GPUs the run holds alone;
* **at the run's end** (:meth:`RunPower.end`, whatever the end: exit, failure, cancel,
  preemption, a lost runner) the limits are restored and the energy stored
  (:mod:`tessera.live.run_energy`).

**Which GPUs a run holds.** The local executor does not give a run GPUs of its own: every rank
sees the service's GPUs (its ``CUDA_VISIBLE_DEVICES``, or all of NVML's). A per-run limit there
would cap other runs' boards, and their energy would be counted as this run's, so both apply
only when the run holds the whole cluster, exclusively (no partner, no other run holding GPUs):
then the scheduler gives nothing else GPUs until it ends. Any other local run that asks for a
limit runs unchanged, and its events say why. Under Ray each rank's host sets the limit on the
GPUs Ray gave that rank and measures them (:mod:`tessera.live.run_power_ray` decides and
collects; :mod:`tessera.live.executors.ray.rank_power` acts on the node).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tessera.errors import SpecError
from tessera.live import run_energy, run_power_ray
from tessera.live.nvml_power import GpuPower
from tessera.live.store import HOLDING, Allocation, Store
from tessera.model.cluster import ClusterSpec

__all__ = ["RunPower", "visible_gpus"]

log = logging.getLogger("tessera.live")


def visible_gpus(nv: Any, env: Mapping[str, str] | None = None) -> list[int] | None:
    """The NVML indices of the GPUs this process's children see (``None``: not understood).

    ``CUDA_VISIBLE_DEVICES`` of integers names them; unset, every GPU NVML counts; UUIDs or MIG
    names are not mapped (``None``: the caller leaves the run unchanged)."""
    raw = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(int(nv.nvmlDeviceGetCount())))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


class RunPower:
    """Power limits and energy of the service's runs (see the module docstring).

    Args:
        state_dir: where the restore records live (private to the service).
        executor: the executor's name (``local`` applies limits here; ``ray`` on the ranks'
            nodes, :mod:`.run_power_ray`; any other leaves runs unchanged).
        cluster: the service's cluster (a local run holding all of it holds the machine).
        nvml: an initialised NVML module (tests: a fake); ``None`` loads ``pynvml`` lazily.
    """

    def __init__(self, state_dir: Path, executor: str, cluster: ClusterSpec,
                 nvml: Any = None) -> None:
        self.gpu = GpuPower(state_dir, nvml)
        self.executor = executor
        self.total_gpus = sum(n.gpus for n in cluster.nodes)

    def check_limit(self, limit_w: float | None) -> None:
        """Refuse at submission a limit outside this machine's GPUs' range.

        Only checked where the runs' GPUs are this machine's (local executor) and NVML answers;
        elsewhere the launch checks it on the boards and the run runs unchanged.

        Raises:
            SpecError: one line naming the value and the range.
        """
        if limit_w is None:
            return
        if not math.isfinite(limit_w) or limit_w <= 0:
            raise SpecError(f"invalid job request: power_limit_w {limit_w} is not a positive "
                            "number of watts")
        if self.executor != "local":
            return
        nv = self.gpu.nvml()
        gpus = visible_gpus(nv) if nv is not None else None
        for i in gpus or ():
            try:
                lo_mw, hi_mw = nv.nvmlDeviceGetPowerManagementLimitConstraints(
                    nv.nvmlDeviceGetHandleByIndex(i))
            except Exception:  # NVMLError: no range known here, the launch says so
                return
            if not lo_mw <= limit_w * 1000 <= hi_mw:
                raise SpecError(f"invalid job request: power_limit_w {limit_w:g} is outside "
                                f"GPU {i}'s range {lo_mw / 1000:g}-{hi_mw / 1000:g} W")

    def recover(self, store: Store, now_s: float) -> list[str]:
        """Restore the limits a crash left (call before anything is launched); each restore
        is an event on its job (or a service event when the job is gone)."""
        lines = self.gpu.recover()
        if not lines:
            return lines
        with store.tx() as db:
            for line in lines:
                stem, _, what = line.partition(": ")
                job_id, _, run = stem.rpartition(".")
                known = store.get(job_id) is not None
                store.event(db, now_s, job_id if known else None, "power",
                            f"run {run}: {what} (left by a service that stopped without "
                            "restoring it; a run adopted now goes on without its limit)"
                            if known else f"{stem}: {what} (left by an earlier service)")
        for line in lines:
            log.warning("power limit left by an earlier service: %s", line)
        return lines

    def _alone(self, store: Store, a: Allocation, exclusive: bool,
               host: tuple[str, int] | None) -> str | None:
        """Why run ``a`` does not hold the machine's GPUs alone (``None``: it does)."""
        if host is not None or a.placement.colocated_with or not exclusive:
            return "the run may share its GPUs with another run"
        if a.placement.num_gpus < self.total_gpus:
            return (f"under the local executor every run sees all of this machine's GPUs, and "
                    f"this run holds {a.placement.num_gpus} of the cluster's {self.total_gpus}")
        others = [b for b in store.allocations(HOLDING)
                  if (b.job_id, b.run) != (a.job_id, a.run) and b.status != "planned"]
        if others:
            return f"run {others[0].run} of {others[0].job_id} still holds GPUs"
        return None

    def begin(self, store: Store, a: Allocation, limit_w: float | None, exclusive: bool,
              host: tuple[str, int] | None, now_s: float,
              packs: bool = True) -> tuple[bool, float | None]:
        """Before run ``a`` launches: read its GPUs' energy counters and set ``limit_w``
        where the run holds them alone; every outcome that concerns the job is an event.

        Returns what the executor's ranks are to do themselves (``LaunchSpec.measure_power``,
        ``.power_limit_w``): under Ray, ``(True, limit_w)`` for a run that holds its GPUs
        alone (``packs``: the policy may co-locate a later run with a non-exclusive one);
        ``(False, None)`` otherwise and under the local executor, which does it here."""
        notes: Sequence[str]
        ranks: tuple[bool, float | None] = (False, None)
        if self.executor == "ray":
            measure, limit, note = run_power_ray.ask(a, limit_w, exclusive, host, packs)
            ranks = (measure, limit)
            notes = (note,) if note else ()
        elif self.executor != "local":
            notes = ((f"power limit {limit_w:g} W not set: the {self.executor} executor does "
                      "not apply per-run power limits yet; the run runs unchanged",)
                     if limit_w is not None else ())
        elif (why := self._alone(store, a, exclusive, host)) is not None:
            notes = ((f"power limit {limit_w:g} W not set: {why}, so a limit would cap other "
                      "runs' boards; the run runs unchanged",) if limit_w is not None else ())
        else:
            nv = self.gpu.nvml()
            gpus = visible_gpus(nv) if nv is not None else []
            if gpus is None:
                notes = ((f"power limit {limit_w:g} W not set: CUDA_VISIBLE_DEVICES of the "
                          "service names GPUs by UUID, which are not mapped; the run runs "
                          "unchanged",) if limit_w is not None else ())
            else:
                started = self.gpu.begin(a.job_id, a.run, gpus, limit_w)
                quiet = limit_w is None and nv is None  # no GPU, nothing asked: no news
                notes = () if quiet else started.notes
        if notes:
            with store.tx() as db:
                for note in notes:
                    store.event(db, now_s, a.job_id, "power", f"run {a.run}: {note}")
        return ranks

    def collect(self, store: Store, executor: object, now_s: float) -> None:
        """Write the power reports of the runs an executor whose ranks measure themselves
        (Ray) released since the last call: events, and each run's energy where known."""
        run_power_ray.collect(store, executor, now_s)

    def end(self, store: Store, db: Any, job_id: str, run: int, now_s: float) -> None:
        """After run ``(job_id, run)`` ended (or was withdrawn after its launch): restore its
        limits and store its energy, inside the transaction ``db`` that records the end. A run
        :meth:`begin` left nothing for is a no-op."""
        done = self.gpu.end(job_id, run)
        notes = list(done.notes)
        if done.energy_j is not None:
            run_energy.record(db, job_id, run, done.energy_j)
            notes.append(f"energy {done.energy_j:.1f} J")
        for note in notes:
            store.event(db, now_s, job_id, "power", f"run {run}: {note}")
