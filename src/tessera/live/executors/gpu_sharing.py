"""How two runs share a GPU on a node: NVIDIA's MPS, or the driver's time-slicing.

Two processes on one GPU run by *time-slicing* (the driver switches contexts; each context has
the whole GPU while it runs) unless the node runs NVIDIA's MPS control daemon, whose clients
run their kernels concurrently. :func:`mechanism` looks for the daemon's control pipe; a shared
run's ranks get ``TESSERA_GPU_SHARING`` (``mps`` or ``time-slicing``) and, under MPS, the
daemon's ``CUDA_MPS_PIPE_DIRECTORY``. Executors ask where their ranks run (the local executor
on this machine, the Ray executor on the host run's node); the service records the answer
(:mod:`tessera.live.sharing`). This module imports nothing of the service, so the executors'
protocol (:mod:`~tessera.live.executors.base`) can name :class:`Mechanism` without depending
on the store.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Where ``nvidia-cuda-mps-control -d`` puts its pipes unless ``CUDA_MPS_PIPE_DIRECTORY`` says.
DEFAULT_MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
#: Variable a shared run's ranks get: ``mps`` or ``time-slicing``.
SHARING_VAR = "TESSERA_GPU_SHARING"

@dataclass(frozen=True, slots=True)
class Mechanism:
    """How two runs share a GPU on this node.

    Attributes:
        kind: ``mps`` (an MPS control daemon runs) or ``time-slicing``.
        pipe_directory: the MPS daemon's pipe directory, for its clients; ``None`` without MPS.
    """

    kind: str
    pipe_directory: str | None = None

    def env(self) -> tuple[tuple[str, str], ...]:
        """What a shared run's ranks get: the mechanism, and the MPS pipes to connect to."""
        out = [(SHARING_VAR, self.kind)]
        if self.pipe_directory is not None:
            out.append(("CUDA_MPS_PIPE_DIRECTORY", self.pipe_directory))
        return tuple(out)


def mechanism(environ: Mapping[str, str] | None = None) -> Mechanism:
    """MPS when this node runs an MPS control daemon, else time-slicing.

    The daemon is taken to run when its control program is installed and its pipe directory
    (``CUDA_MPS_PIPE_DIRECTORY``, default ``/tmp/nvidia-mps``) holds the ``control`` pipe the
    daemon creates while it runs.
    """
    env = os.environ if environ is None else environ
    pipes = env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_MPS_PIPE_DIRECTORY
    if shutil.which("nvidia-cuda-mps-control", path=env.get("PATH")) is None:
        return Mechanism("time-slicing")
    if not (Path(pipes) / "control").exists():
        return Mechanism("time-slicing")
    return Mechanism("mps", pipes)
