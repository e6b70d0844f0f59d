"""``tessera serve --mig-gpus``: which device layer the inference services use.

``--mig-gpus nvml`` uses this machine's GPUs through NVML (:mod:`.nvml`); ``--mig-gpus
fake:A100-80GB:2`` two fake A100-80GBs whose state lives in the state dir
(``fake-gpus.json``), for trying services without a GPU. Without the option the service runs no
inference services (``/api/services`` answers 409).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tessera.errors import SpecError
from tessera.live.inference.devices import FakeDevices, GpuDevices
from tessera.live.inference.manager import InferenceManager
from tessera.live.inference.nvml import NvmlDevices

if TYPE_CHECKING:
    from tessera.live.service import LiveService

FAKE_STATE_NAME = "fake-gpus.json"


def parse_mig_gpus(text: str, state_dir: Path) -> GpuDevices:
    """The device layer ``text`` names (see the module docstring).

    Raises:
        SpecError: anything else, in one line with the two accepted forms.
    """
    usage = "--mig-gpus takes nvml or fake:MODEL:COUNT (e.g. fake:A100-80GB:2)"
    if text == "nvml":
        return NvmlDevices()
    kind, _, rest = text.partition(":")
    model, _, count = rest.rpartition(":")
    if kind != "fake" or not model or not count.isdigit():
        raise SpecError(f"{usage}, not {text!r}")
    return FakeDevices(state_dir / FAKE_STATE_NAME, model, int(count))


def attach(svc: LiveService, text: str, state_dir: Path) -> InferenceManager:
    """Give ``svc`` an inference manager on the device layer ``text`` names."""
    manager = InferenceManager(svc, parse_mig_gpus(text, state_dir))
    svc.inference = manager
    return manager
