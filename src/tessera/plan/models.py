"""Layer-wise model descriptions, generated from architecture formulas.

A pipeline planner needs, per layer, how much work it is, how many parameters it holds, how
much activation memory it keeps for the backward pass, and how much data it hands to the next
layer. No measured per-layer profile ships with Tessera, so these come from the standard
counting formulas (one multiply-add = 2 FLOPs; training ≈ 3 × forward FLOPs, since the backward
pass computes gradients for both inputs and weights):

**Transformer block** (hidden h, sequence s, heads a; Megatron-LM's counting, Narayanan et al.
SC'21): parameters ``12h² + 13h``; forward FLOPs per sequence ``24·s·h² + 4·s²·h`` (QKV 6sh²,
scores 2s²h, weighted values 2s²h, output projection 2sh², MLP 16sh²); activations stashed per
sequence in fp16 without recomputation ``s·h·(34 + 5·a·s/h)`` bytes (Korthikanti et al.,
"Reducing Activation Recomputation in Large Transformer Models", 2022); hand-off ``2·s·h`` bytes.

**Convolution** (k×k, C_in → C_out, output H×W): parameters ``k²·C_in·C_out``, forward FLOPs
``2·k²·C_in·C_out·H·W``. A ResNet bottleneck block's stash counts each convolution's output
three times (conv, batch-norm and ReLU outputs) in fp16.

Generated totals match the published sizes: ResNet-50 25.6 M parameters and 4.1 GMAC forward per
224² image, BERT-large 335 M, GPT-2 XL (48 × 1600) 1.56 B (tests check these).
"""

from __future__ import annotations

import itertools
import re
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


def gpt(n_layers: int = 48, hidden: int = 1600, heads: int = 25, seq: int = 1024,
        vocab: int = 50257) -> LayeredModel:
    """A GPT-style decoder (default GPT-2 XL); embedding and tied LM head as end layers."""
    s, h, v = float(seq), float(hidden), float(vocab)
    emb = Layer("embedding", 0.0, v * h + s * h, FP16_BYTES * s * h, FP16_BYTES * s * h,
                tp_ok=True, stash_unsplit_bytes=FP16_BYTES * s * h,
                tp_comm_bytes=FP16_BYTES * s * h, tp_collectives=1)
    head = Layer("lm_head", 2 * s * h * v, 2 * h, 4.0 * s * v + FP16_BYTES * s * h, 0.0,
                 tp_ok=True, stash_unsplit_bytes=FP16_BYTES * s * h,
                 tp_comm_bytes=FP16_BYTES * s * h, tp_collectives=1)
    blocks = tuple(transformer_block(f"block{i}", hidden, seq, heads) for i in range(n_layers))
    return LayeredModel(f"gpt-{n_layers}x{hidden}", (emb, *blocks, head))


def bert_large(seq: int = 512) -> LayeredModel:
    """BERT-large (24 × 1024, 16 heads) with its masked-LM head."""
    s, h, v = float(seq), 1024.0, 30522.0
    emb = Layer("embedding", 0.0, v * h + 512 * h + 2 * h + 2 * h, FP16_BYTES * s * h,
                FP16_BYTES * s * h)
    blocks = tuple(transformer_block(f"block{i}", 1024, seq, 16) for i in range(24))
    head = Layer("mlm_head", 2 * s * h * h + 2 * s * h * v, h * h + 3 * h + v,
                 4.0 * s * v + 3 * FP16_BYTES * s * h, 0.0)
    return LayeredModel("bert-large", (emb, *blocks, head))


def _conv(k: int, cin: int, cout: int, hw: int) -> tuple[float, float, float]:
    """(forward FLOPs, params with batch-norm, output elements) of a k×k convolution."""
    return (2.0 * k * k * cin * cout * hw * hw, float(k * k * cin * cout + 2 * cout),
            float(cout * hw * hw))


def _bottleneck(name: str, cin: int, mid: int, hw_in: int, stride: int) -> Layer:
    cout, hw = 4 * mid, hw_in // stride
    convs = [_conv(1, cin, mid, hw_in), _conv(3, mid, mid, hw), _conv(1, mid, cout, hw)]
    if stride != 1 or cin != cout:
        convs.append(_conv(1, cin, cout, hw))   # projection shortcut
    flops = sum(c[0] for c in convs)
    params = sum(c[1] for c in convs)
    elems = sum(c[2] for c in convs)
    return Layer(name, flops, params, 3 * FP16_BYTES * elems, FP16_BYTES * cout * hw * hw)


def resnet50(image: int = 224) -> LayeredModel:
    """ResNet-50 v1.5 as stem, 16 bottleneck blocks and the classifier."""
    stem_flops, stem_params, stem_out = _conv(7, 3, 64, image // 2)
    layers = [Layer("stem", stem_flops, stem_params, 3 * FP16_BYTES * stem_out,
                    FP16_BYTES * 64 * (image // 4) ** 2)]
    cin, hw = 64, image // 4
    for stage, (mid, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 0) else 1
            layers.append(_bottleneck(f"stage{stage + 1}.block{b}", cin, mid, hw, stride))
            cin, hw = 4 * mid, hw // stride
    layers.append(Layer("fc", 2.0 * 2048 * 1000, 2048 * 1000 + 1000, FP16_BYTES * 2048, 0.0))
    return LayeredModel("resnet50", tuple(layers), grad_bytes_per_param=4.0, workload="cnn")


def layered_model(name: str) -> LayeredModel:
    """Look a layer-wise model up by name: ``gpt``, ``gpt-<layers>x<hidden>``, ``bert-large``,
    ``resnet50``, ``vit-l16`` and the transformers of :mod:`tessera.plan.transformers`
    (``gpt3-1.3b`` … ``llama-7b``, ``llama-13b``, ``llama-70b``).

    Raises:
        NoProfileError: the name is not one of those.
    """
    from tessera.plan.transformers import SPECS, decoder, vit_large

    key = name.strip().lower()
    if key in {"gpt", "gpt2-xl"}:
        return gpt()
    if key in SPECS:
        return decoder(SPECS[key])
    if key in {"vit-l16", "vit-l", "vit-large"}:
        return vit_large()
    m = re.fullmatch(r"gpt-(\d+)x(\d+)", key)
    if m:
        layers, hidden = int(m.group(1)), int(m.group(2))
        if layers < 1 or hidden < 64 or hidden % 64:
            raise NoProfileError(f"gpt size {name!r}: need >= 1 layer and hidden a multiple of 64")
        return gpt(layers, hidden, heads=hidden // 64)
    if key in {"bert-large", "bert_large"}:
        return bert_large()
    if key in {"resnet50", "resnet-50"}:
        return resnet50()
    raise NoProfileError(f"no layer-wise description of model {name!r}; known: gpt, "
                         f"gpt-<layers>x<hidden>, bert-large, resnet50, vit-l16, "
                         f"{', '.join(SPECS)}")
