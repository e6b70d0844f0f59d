"""The real device layer: MIG geometry through NVML (``nvidia-ml-py``), MPS through its daemon.

Each GPU instance is created with an explicit placement
(``nvmlDeviceCreateGpuInstanceWithPlacement``: profile ID and start slice, the planner's
``kind@start``), then one compute instance spanning it (the GI's full compute profile), so that
one ``MIG-<uuid>`` device names the slice. Destroying goes the other way: compute instances
first, then the GPU instance. MIG mode itself is left alone: turning it on needs a GPU reset,
which a scheduler must not do under running jobs; a GPU with MIG mode off is refused with the
``nvidia-smi`` command that turns it on.

NVML is imported only when this class is built (``pip install nvidia-ml-py``), so machines
without a GPU never load it. Creating or destroying instances needs root; without it NVML answers
``NVML_ERROR_NO_PERMISSION`` and the layer raises :class:`~.devices.DeviceError` saying so.

MPS: :meth:`NvmlDevices.mps` starts ``nvidia-cuda-mps-control -d`` when its control pipe is not
there yet (:func:`tessera.live.executors.gpu_sharing.mechanism` looks for it) and answers
whether a daemon now runs; without the program, replicas of one slice time-slice instead.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from tessera.live.executors.gpu_sharing import mechanism
from tessera.live.inference.devices import DeviceError, GpuInfo, MigInstance
from tessera.model.gpus import resolve_flavor
from tessera.share.mig import MigGpu, Placement, mig_gpu


class NvmlDevices:
    """The GPUs of this machine through NVML (see the module docstring)."""

    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml  # lazy: only machines with NVIDIA GPUs need nvidia-ml-py
        except ImportError:
            raise DeviceError("real GPUs need NVML: pip install nvidia-ml-py (or try services "
                              "without a GPU: tessera serve --mig-gpus fake:A100-80GB:2)") from None
        self.nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise DeviceError(f"NVML did not start ({e}): is the NVIDIA driver loaded?") from None

    def _handle(self, gpu: int) -> Any:
        try:
            return self.nv.nvmlDeviceGetHandleByIndex(gpu)
        except self.nv.NVMLError as e:
            raise DeviceError(f"no GPU {gpu}: {e}") from None

    def _lattice(self, handle: Any) -> MigGpu:
        name = self.nv.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            return mig_gpu(resolve_flavor(name).short)
        except Exception as e:
            raise DeviceError(f"GPU {name!r} has no MIG lattice in Tessera: {e}") from None

    def gpus(self) -> tuple[GpuInfo, ...]:
        out = []
        for i in range(self.nv.nvmlDeviceGetCount()):
            h = self._handle(i)
            uuid = self.nv.nvmlDeviceGetUUID(h)
            current, _pending = self.nv.nvmlDeviceGetMigMode(h)
            out.append(GpuInfo(i, uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                               self._lattice(h).gpu, current == self.nv.NVML_DEVICE_MIG_ENABLE))
        return tuple(out)

    def _mig_on(self, gpu: int) -> Any:
        h = self._handle(gpu)
        current, _pending = self.nv.nvmlDeviceGetMigMode(h)
        if current != self.nv.NVML_DEVICE_MIG_ENABLE:
            raise DeviceError(f"MIG mode is off on GPU {gpu}: turn it on with "
                              f"`sudo nvidia-smi -i {gpu} -mig 1` (needs an idle GPU)")
        return h

    def _gis(self, gpu: int) -> list[tuple[Any, Placement, str]]:
        """(GPU instance handle, placement, profile name) of every GI on ``gpu``."""
        h = self._mig_on(gpu)
        lattice = self._lattice(h)
        out = []
        for prof in lattice.profiles:
            try:
                gis = self.nv.nvmlDeviceGetGpuInstances(h, prof.gi_profile_id)
            except self.nv.NVMLError:
                continue
            for gi in gis:
                info = self.nv.nvmlGpuInstanceGetInfo(gi)
                out.append((gi, Placement(int(info.placement.start), prof.kind), prof.name))
        return out

    def instances(self, gpu: int) -> tuple[MigInstance, ...]:
        h = self._mig_on(gpu)
        by_gi: dict[int, str] = {}
        for k in range(self.nv.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mig = self.nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except self.nv.NVMLError:
                continue
            uuid = self.nv.nvmlDeviceGetUUID(mig)
            by_gi[int(self.nv.nvmlDeviceGetGpuInstanceId(mig))] = (
                uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        out = []
        for gi, pl, profile in self._gis(gpu):
            gi_id = int(self.nv.nvmlGpuInstanceGetInfo(gi).id)
            if gi_id in by_gi:
                out.append(MigInstance(gpu, pl, profile, by_gi[gi_id]))
        return tuple(sorted(out, key=lambda m: m.placement))

    def create(self, gpu: int, placement: Placement) -> MigInstance:
        h = self._mig_on(gpu)
        prof = self._lattice(h).profile(placement.kind)
        nv = self.nv
        try:
            info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, prof.gi_profile_id)
            where = nv.c_nvmlGpuInstancePlacement_t()
            where.start, where.size = placement.start, prof.memory_slices
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, where)
            ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, _ci_profile(nv, prof.compute_slices),
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
        except nv.NVMLError as e:
            raise DeviceError(_why(nv, e, f"create {placement} on GPU {gpu}")) from None
        for inst in self.instances(gpu):
            if inst.placement == placement:
                return inst
        raise DeviceError(f"GPU {gpu}: {placement} was created but NVML lists no MIG device "
                          "for it")

    def destroy(self, gpu: int, placement: Placement) -> None:
        nv = self.nv
        for gi, pl, _profile in self._gis(gpu):
            if pl != placement:
                continue
            try:
                for ci_prof in range(8):
                    try:
                        cis = nv.nvmlGpuInstanceGetComputeInstances(gi, ci_prof)
                    except nv.NVMLError:
                        continue
                    for ci in cis:
                        nv.nvmlComputeInstanceDestroy(ci)
                nv.nvmlGpuInstanceDestroy(gi)
            except nv.NVMLError as e:
                raise DeviceError(_why(nv, e, f"destroy {placement} on GPU {gpu}")) from None
            return
        raise DeviceError(f"GPU {gpu} has no instance {placement}")

    def mps(self) -> bool:
        if mechanism().kind == "mps":
            return True
        control = shutil.which("nvidia-cuda-mps-control")
        if control is None:
            return False
        subprocess.run([control, "-d"], check=False, timeout=10, capture_output=True)
        return mechanism().kind == "mps"


def _ci_profile(nv: Any, compute_slices: int) -> int:
    """NVML's compute-instance profile constant for a CI of ``compute_slices`` slices."""
    return int(getattr(nv, f"NVML_COMPUTE_INSTANCE_PROFILE_{compute_slices}_SLICE"))


def _why(nv: Any, e: Exception, what: str) -> str:
    if getattr(e, "value", None) == getattr(nv, "NVML_ERROR_NO_PERMISSION", object()):
        return f"cannot {what}: NVML says no permission (changing MIG geometry needs root)"
    return f"cannot {what}: {e}"
