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

import re

from tessera.errors import NoProfileError

# The model type and its building blocks live in :mod:`tessera.plan.layers`; re-exported here.
from tessera.plan.layers import FP16_BYTES as FP16_BYTES
from tessera.plan.layers import Layer as Layer
from tessera.plan.layers import LayeredModel as LayeredModel
from tessera.plan.layers import coarsen as coarsen
from tessera.plan.layers import merge_layers as merge_layers
from tessera.plan.layers import transformer_block as transformer_block
from tessera.plan.transformers import SPECS, decoder, vit_large


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
