"""The GPU device layer: MIG geometry (GPU and compute instances) and MPS, behind one interface.

The manager (:mod:`.manager`) never talks to a driver itself; it asks a :class:`GpuDevices`:

* :meth:`~GpuDevices.gpus` -- the GPUs of this machine (index, UUID, model, MIG mode);
* :meth:`~GpuDevices.instances` -- the MIG instances on one GPU, each with the ``MIG-<uuid>``
  a process puts in ``CUDA_VISIBLE_DEVICES`` to run on it;
* :meth:`~GpuDevices.create` / :meth:`~GpuDevices.destroy` -- one GPU instance (with its one
  compute instance spanning it) at an explicit placement (``3g@4``);
* :meth:`~GpuDevices.mps` -- whether an MPS control daemon serves the slices (started if the
  layer may start it), so that several processes share one slice concurrently.

Two implementations: :class:`FakeDevices` here (tests, ``tessera serve --mig-gpus
fake:A100-80GB:2``), and :class:`~tessera.live.inference.nvml.NvmlDevices` (NVML through
``nvidia-ml-py``, imported only when used). The fake enforces the hardware's placement rules
(:func:`tessera.share.mig.check_layout`: allowed starts, no overlap, one ``+me``) and keeps its
state in a JSON file, so a restarted service finds the instances the previous one created, as
it would on a real GPU.

Where the service may not change MIG geometry (no GPU, MIG mode off, not root), the layer raises
:class:`DeviceError` with one line saying what to do; the manager records it as a service event.
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from tessera.errors import TesseraError
from tessera.share.mig import Placement, check_layout, mig_gpu


class DeviceError(TesseraError):
    """The device layer could not do what was asked (no permission, no GPU, illegal layout)."""


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU: NVML index, UUID, model (Tessera's short name) and MIG mode."""

    index: int
    uuid: str
    model: str
    mig_enabled: bool


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One GPU instance with its compute instance: where it sits and how a process names it.

    Attributes:
        gpu: the index of its GPU.
        placement: kind and start memory slice (``3g@4``).
        profile: NVIDIA's profile name (``3g.40gb``), as a quota line names it.
        uuid: the MIG device's UUID, ``MIG-...``: a process's ``CUDA_VISIBLE_DEVICES``.
    """

    gpu: int
    placement: Placement
    profile: str
    uuid: str


class GpuDevices(Protocol):
    """What the manager needs of the GPUs (see the module docstring)."""

    name: str

    def gpus(self) -> tuple[GpuInfo, ...]: ...

    def instances(self, gpu: int) -> tuple[MigInstance, ...]: ...

    def create(self, gpu: int, placement: Placement) -> MigInstance:
        """Create a GPU instance at ``placement`` and one compute instance spanning it."""

    def destroy(self, gpu: int, placement: Placement) -> None:
        """Destroy the instance at ``placement`` (its compute instance first)."""

    def mps(self) -> bool:
        """Whether an MPS control daemon serves the slices (start it where permitted)."""


class FakeDevices:
    """GPUs that exist only in a JSON file, with the real MIG placement rules.

    Args:
        state_file: where the instances live (created on first use; a restart reads it).
        model: the GPU model (``A100-80GB``; it must have MIG).
        count: how many GPUs.
        mig_allowed: ``False`` plays a service without permission to change MIG geometry:
            :meth:`create` and :meth:`destroy` raise :class:`DeviceError`.
    """

    name = "fake"

    def __init__(self, state_file: Path, model: str = "A100-80GB", count: int = 1,
                 mig_allowed: bool = True) -> None:
        if count < 1:
            raise DeviceError(f"fake GPUs: count must be >= 1, got {count}")
        self.gpu = mig_gpu(model)  # raises on a GPU without MIG
        self.path = state_file
        self.count = count
        self.mig_allowed = mig_allowed
        if not self.path.exists():
            self._write({"gpus": [{"uuid": f"GPU-{uuidlib.uuid4()}", "instances": []}
                                  for _ in range(count)], "mps": False})
        if len(self._read()["gpus"]) != count:
            raise DeviceError(f"fake GPUs in {self.path} number {len(self._read()['gpus'])}, "
                              f"not {count}: use the same count or a new state file")

    def _read(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)

    def _gpu_rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._read()["gpus"]
        return rows

    def gpus(self) -> tuple[GpuInfo, ...]:
        return tuple(GpuInfo(i, str(g["uuid"]), self.gpu.gpu, True)
                     for i, g in enumerate(self._gpu_rows()))

    def instances(self, gpu: int) -> tuple[MigInstance, ...]:
        row = self._row(gpu)
        out = []
        for inst in row["instances"]:
            pl = Placement(int(inst["start"]), str(inst["kind"]))
            out.append(MigInstance(gpu, pl, self.gpu.profile(pl.kind).name, str(inst["uuid"])))
        return tuple(sorted(out, key=lambda m: m.placement))

    def _row(self, gpu: int) -> dict[str, Any]:
        rows = self._gpu_rows()
        if not 0 <= gpu < len(rows):
            raise DeviceError(f"no GPU {gpu}: this machine has GPUs 0..{len(rows) - 1}")
        return rows[gpu]

    def _check_allowed(self, what: str) -> None:
        if not self.mig_allowed:
            raise DeviceError(f"cannot {what}: changing MIG geometry is not permitted here "
                              "(the service must run as root on a GPU with MIG mode on)")

    def create(self, gpu: int, placement: Placement) -> MigInstance:
        self._check_allowed(f"create {placement} on GPU {gpu}")
        data = self._read()
        rows = data["gpus"]
        self._row(gpu)
        have = [Placement(int(i["start"]), str(i["kind"])) for i in rows[gpu]["instances"]]
        try:
            check_layout(self.gpu, [*have, placement])
        except TesseraError as e:
            raise DeviceError(f"GPU {gpu}: cannot create {placement}: {e}") from None
        inst = {"kind": placement.kind, "start": placement.start, "uuid": f"MIG-{uuidlib.uuid4()}"}
        rows[gpu]["instances"].append(inst)
        self._write(data)
        return MigInstance(gpu, placement, self.gpu.profile(placement.kind).name,
                           str(inst["uuid"]))

    def destroy(self, gpu: int, placement: Placement) -> None:
        self._check_allowed(f"destroy {placement} on GPU {gpu}")
        data = self._read()
        rows = data["gpus"]
        self._row(gpu)
        kept = [i for i in rows[gpu]["instances"]
                if (int(i["start"]), str(i["kind"])) != (placement.start, placement.kind)]
        if len(kept) == len(rows[gpu]["instances"]):
            raise DeviceError(f"GPU {gpu} has no instance {placement}")
        rows[gpu]["instances"] = kept
        self._write(data)

    def mps(self) -> bool:
        data = self._read()
        data["mps"] = True
        self._write(data)
        return True

    def state(self) -> dict[str, Any]:
        """The whole fake state (tests read it)."""
        return self._read()


def describe(inst: MigInstance) -> str:
    """``GPU 1 3g@4 (3g.40gb, MIG-...)``: for events."""
    return f"GPU {inst.gpu} {inst.placement} ({inst.profile}, {inst.uuid})"


def instance_json(inst: MigInstance) -> dict[str, object]:
    d = asdict(inst)
    d["placement"] = str(inst.placement)
    return d
