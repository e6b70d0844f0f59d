"""How large a batch fits on a GPU.

Training memory on one GPU has two parts:

* **Model state**, independent of the batch: weights, gradients and optimizer state. With mixed
  precision and Adam each parameter costs 16 bytes (fp16 weight 2 + fp16 gradient 2 + fp32
  master weight 4 + Adam first and second moments 4 + 4); fp32 training with Adam costs 16 as
  well (4 + 4 + 8), plain SGD with momentum in fp32 12 bytes.
* **Activations**, proportional to the local batch: every layer's outputs kept for the backward
  pass, in bytes per sample.

So the largest local batch is ``floor((usable − state) / activation_per_sample)``, where
``usable`` is the GPU's memory less a reserve for the CUDA context, the allocator's
fragmentation and workspace (we keep ``reserve_frac`` = 10 % plus 1 GiB).

When a measured profile exists the planner uses the **largest batch measured** instead (the
Sia/Pollux profilers stopped where memory ran out or where their batch limit was): it is a
measurement, and the planner never extrapolates a profile beyond it. The analytic model is used
for layer-wise model descriptions (pipeline planning), where no profile exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.errors import SpecError

GIB = 1024**3

#: Bytes of model state per parameter for common recipes (see module docstring).
STATE_BYTES_PER_PARAM: dict[str, float] = {
    "mixed_adam": 16.0,
    "fp32_adam": 16.0,
    "fp32_sgd": 12.0,
}


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """Usable memory on a GPU after the fixed reserve.

    Attributes:
        mem_gib: the GPU's memory.
        reserve_frac: fraction held back for fragmentation and workspace.
        reserve_gib: fixed amount held back for the CUDA context.
    """

    mem_gib: float
    reserve_frac: float = 0.10
    reserve_gib: float = 1.0

    @property
    def usable_bytes(self) -> float:
        return max(0.0, (self.mem_gib * (1.0 - self.reserve_frac) - self.reserve_gib) * GIB)


@dataclass(frozen=True, slots=True)
class TrainingFootprint:
    """Memory a piece of a model needs for training.

    Attributes:
        params: parameters held (the whole model, or one pipeline stage's layers).
        activation_bytes_per_sample: activations stashed per sample for the backward pass.
        state_bytes_per_param: model-state bytes per parameter (16 for mixed precision + Adam).
    """

    params: float
    activation_bytes_per_sample: float
    state_bytes_per_param: float = STATE_BYTES_PER_PARAM["mixed_adam"]

    @property
    def state_bytes(self) -> float:
        return self.params * self.state_bytes_per_param

    def bytes_at(self, local_bsz: float) -> float:
        """Total bytes at a given local batch."""
        return self.state_bytes + self.activation_bytes_per_sample * local_bsz

    def fits(self, budget: MemoryBudget, local_bsz: float) -> bool:
        return self.bytes_at(local_bsz) <= budget.usable_bytes

    def max_local_bsz(self, budget: MemoryBudget) -> int:
        """Largest integer batch that fits; 0 when even the model state does not."""
        free = budget.usable_bytes - self.state_bytes
        if free <= 0:
            return 0
        if self.activation_bytes_per_sample <= 0:
            raise SpecError("activation_bytes_per_sample must be positive")
        return math.floor(free / self.activation_bytes_per_sample)

    def min_mem_gib(self, local_bsz: float, reserve_frac: float = 0.10,
                    reserve_gib: float = 1.0) -> float:
        """Smallest GPU (GiB) on which ``local_bsz`` samples fit, inverting the budget rule."""
        need = self.bytes_at(local_bsz) / GIB + reserve_gib
        return need / (1.0 - reserve_frac)
