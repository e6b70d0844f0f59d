"""The layer-wise model type and its building blocks: :class:`Layer`, :class:`LayeredModel`,
:func:`coarsen` and the transformer block's counting formula.

Kept apart from :mod:`tessera.plan.models` (which generates whole models and looks them up by
name) so that model generators — :mod:`tessera.plan.models` and
:mod:`tessera.plan.transformers` — both build on it without importing each other. The formulas
are explained in :mod:`tessera.plan.models`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from itertools import accumulate

from tessera.errors import NoProfileError

FP16_BYTES = 2


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer (or block) of a model, per training sample.

    Attributes:
        name: e.g. ``block7``.
        fwd_flops: forward FLOPs per sample.
        params: parameters.
        stash_bytes: activation bytes kept per sample for the backward pass.
        out_bytes: bytes per sample handed to the next layer (pipeline hand-off size).
        tp_ok: whether the layer can be split by tensor (Megatron) parallelism.
        stash_unsplit_bytes: the part of ``stash_bytes`` every tensor-parallel rank keeps whole
            (layer-norm inputs, dropout masks, the block's input); the rest is divided among
            the ranks.
        tp_comm_bytes: bytes all-reduced among the tensor-parallel ranks per sample, forward
            and backward together (Megatron: two all-reduces of the ``s·h`` activations each
            way per transformer block).
        tp_collectives: number of those all-reduces (each pays the link latency).
    """

    name: str
    fwd_flops: float
    params: float
    stash_bytes: float
    out_bytes: float
    tp_ok: bool = False
    stash_unsplit_bytes: float | None = None
    tp_comm_bytes: float = 0.0
    tp_collectives: int = 0

    @property
    def stash_kept_whole_bytes(self) -> float:
        """Stash bytes not divided by tensor parallelism (all of it when unset)."""
        return self.stash_bytes if self.stash_unsplit_bytes is None else self.stash_unsplit_bytes


@dataclass(frozen=True, slots=True)
class LayeredModel:
    """A model as a chain of layers.

    Attributes:
        name: model name.
        layers: the chain, input first.
        state_bytes_per_param: model-state bytes per parameter (16: fp16 + Adam, see
            :mod:`tessera.perf.memory`).
        grad_bytes_per_param: bytes per gradient element all-reduced (2: fp16).
        workload: which calibration of sustained FLOP/s applies (``transformer`` or ``cnn``,
            see :mod:`tessera.perf.roofline`).
        origin_ends: for a coarsened chain (:func:`coarsen`), the end index in the original
            chain of each layer; empty otherwise.
    """

    name: str
    layers: tuple[Layer, ...]
    state_bytes_per_param: float = 16.0
    grad_bytes_per_param: float = 2.0
    workload: str = "transformer"
    origin_ends: tuple[int, ...] = ()

    def original_layer(self, j: int) -> int:
        """Index in the uncoarsened chain of this chain's layer boundary ``j``."""
        if not self.origin_ends or j == 0:
            return j
        return self.origin_ends[j - 1]

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def params(self) -> float:
        return sum(x.params for x in self.layers)

    @property
    def train_flops_per_sample(self) -> float:
        return 3.0 * sum(x.fwd_flops for x in self.layers)

    def prefix(self, attr: str) -> list[float]:
        """Prefix sums of a per-layer attribute (length n_layers + 1)."""
        return [0.0, *accumulate(float(getattr(x, attr)) for x in self.layers)]


def merge_layers(name: str, layers: tuple[Layer, ...]) -> Layer:
    """Consecutive layers as one (a pipeline stage boundary can no longer fall between them)."""
    return Layer(
        name=name,
        fwd_flops=sum(x.fwd_flops for x in layers),
        params=sum(x.params for x in layers),
        stash_bytes=sum(x.stash_bytes for x in layers),
        out_bytes=layers[-1].out_bytes,
        tp_ok=all(x.tp_ok for x in layers),
        stash_unsplit_bytes=sum(x.stash_kept_whole_bytes for x in layers),
        tp_comm_bytes=sum(x.tp_comm_bytes for x in layers),
        tp_collectives=sum(x.tp_collectives for x in layers),
    )


def coarsen(model: LayeredModel, max_layers: int) -> LayeredModel:
    """``model`` with runs of consecutive layers merged so that at most ``max_layers`` remain.

    The pipeline search is exact over the chain it is given; on a coarsened chain its stage
    boundaries fall only between the merged runs (every g-th block), which shrinks the search
    (its cost grows with the cube of the chain length). The first and last layers (embedding,
    head) stay on their own when there is room.
    """
    n = model.n_layers
    if max_layers < 1:
        raise NoProfileError("max_layers must be >= 1")
    if n <= max_layers:
        return model
    ends = model.layers[:1], model.layers[-1:]
    body = model.layers[1:-1] if max_layers >= 3 else model.layers
    room = max_layers - 2 if max_layers >= 3 else max_layers
    g = -(-len(body) // room)                    # ceil: layers per merged run
    runs = tuple(merge_layers(f"{body[i].name}..{body[min(i + g, len(body)) - 1].name}",
                              body[i:i + g]) for i in range(0, len(body), g))
    layers = (*ends[0], *runs, *ends[1]) if max_layers >= 3 else runs
    sizes = ([1] if max_layers >= 3 else []) + [len(body[i:i + g])
                                                for i in range(0, len(body), g)]
    sizes += [1] if max_layers >= 3 else []
    origin = tuple(itertools.accumulate(sizes))
    return LayeredModel(model.name, layers, model.state_bytes_per_param,
                        model.grad_bytes_per_param, model.workload, origin)


def transformer_block(name: str, hidden: int, seq: int, heads: int) -> Layer:
    """A GPT-2-style block (4h MLP); with t-way tensor parallelism its stash per sample is
    ``s·h·(10 + 24/t + 5·a·s/(h·t))`` (Korthikanti et al.), so 10·s·h stays whole."""
    h, s, a = float(hidden), float(seq), float(heads)
    return Layer(
        name=name,
        fwd_flops=24 * s * h * h + 4 * s * s * h,
        params=12 * h * h + 13 * h,
        stash_bytes=s * h * (34 + 5 * a * s / h),
        out_bytes=FP16_BYTES * s * h,
        tp_ok=True,
        stash_unsplit_bytes=10 * s * h,
        tp_comm_bytes=4 * FP16_BYTES * s * h,
        tp_collectives=4,
    )
