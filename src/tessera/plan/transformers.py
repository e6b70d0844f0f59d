"""Layer descriptions of today's transformers: GPT-3-style, LLaMA-style and ViT.

Sizes follow the published architectures; the counting is the standard one (Kaplan et al.
2020, Narayanan et al. SC'21): a matrix multiply of an s × a input with an a × b weight costs
``2·s·a·b`` FLOPs forward and twice that backward, so training costs ``6·N`` FLOPs per token for
the N parameters that multiply activations, plus attention's ``12·L·s·h`` per token (scores and
weighted values, ``4·s²·h`` forward per layer and sequence). Input embeddings are lookups
(parameters, no FLOPs); the LM head is a matrix multiply.

**LLaMA block** (hidden h, SwiGLU width f, h/a-sized heads, k key/value heads): attention
``2h² + 2·h·(k·h/a)`` parameters (grouped-query attention shares K and V among heads), MLP
``3·h·f``, two RMSNorms ``2h``. Activations stashed per sequence in bf16 with FlashAttention
(which keeps no s × s matrices): the two norm inputs 4sh, Q/K/V and the attention output
``2·(2sh + 2·s·kv)``, the MLP's input 2sh, gate and up outputs 4sf and the SiLU·up product
2sf. With t-way tensor parallelism the norm inputs and the inputs of the attention and MLP
matrices (8sh) are kept whole on every rank; the rest is split.

**GPT-3 style** blocks are :func:`tessera.plan.layers.transformer_block` (4h MLP, learned
positions, tied embeddings). **ViT-L/16** is 24 such blocks over 197 tokens (196 patches and a
class token) behind a 16 × 16 patch projection, with a 1000-class head.

:data:`PUBLISHED_PARAMS` records the published sizes the tests check these against.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.plan.layers import FP16_BYTES, Layer, LayeredModel, transformer_block


@dataclass(frozen=True, slots=True)
class TransformerSpec:
    """Architecture numbers of a decoder-only transformer.

    Attributes:
        name: model name.
        style: ``gpt`` (4h GeLU MLP, tied embeddings, learned positions) or ``llama``
            (SwiGLU, untied embeddings, rotary positions, RMSNorm).
        layers: transformer blocks.
        hidden: hidden size h.
        heads: attention heads.
        seq: training sequence length in tokens.
        vocab: vocabulary size.
        ffn: MLP width (``llama``; ``gpt`` uses 4h).
        kv_heads: key/value heads (grouped-query attention); ``heads`` when not grouped.
    """

    name: str
    style: str
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn: int = 0
    kv_heads: int = 0


#: Published configurations (GPT-3 paper Table 2.1; LLaMA paper Table 2; Llama 2 paper).
SPECS: dict[str, TransformerSpec] = {
    s.name: s for s in (
        TransformerSpec("gpt3-1.3b", "gpt", 24, 2048, 16, 2048, 50257),
        TransformerSpec("gpt3-2.7b", "gpt", 32, 2560, 32, 2048, 50257),
        TransformerSpec("gpt3-6.7b", "gpt", 32, 4096, 32, 2048, 50257),
        TransformerSpec("gpt3-13b", "gpt", 40, 5140, 40, 2048, 50257),
        TransformerSpec("gpt3-175b", "gpt", 96, 12288, 96, 2048, 50257),
        TransformerSpec("llama-7b", "llama", 32, 4096, 32, 2048, 32000, 11008, 32),
        TransformerSpec("llama-13b", "llama", 40, 5120, 40, 2048, 32000, 13824, 40),
        TransformerSpec("llama-70b", "llama", 80, 8192, 64, 4096, 32000, 28672, 8),
    )
}

#: Published parameter counts (GPT-3 Table 2.1; LLaMA Table 2 and Llama 2's model cards give
#: 6.7B, 13.0B and 69B (68.98B) parameters; ViT-L/16 304M, Dosovitskiy et al. Table 1).
PUBLISHED_PARAMS: dict[str, float] = {
    "gpt3-1.3b": 1.3e9, "gpt3-2.7b": 2.7e9, "gpt3-6.7b": 6.7e9, "gpt3-13b": 13.0e9,
    "gpt3-175b": 175.0e9,
    "llama-7b": 6.7e9, "llama-13b": 13.0e9, "llama-70b": 69.0e9, "vit-l16": 304e6,
}


def llama_block(name: str, hidden: int, heads: int, kv_heads: int, ffn: int, seq: int) -> Layer:
    h, s, f = float(hidden), float(seq), float(ffn)
    kv = float(kv_heads) * h / heads
    matmul_params = 2 * h * h + 2 * h * kv + 3 * h * f
    stash = 4 * s * h + FP16_BYTES * (2 * s * h + 2 * s * kv) + 2 * s * h + 6 * s * f
    return Layer(
        name=name,
        fwd_flops=2 * s * matmul_params + 4 * s * s * h,
        params=matmul_params + 2 * h,
        stash_bytes=stash,
        out_bytes=FP16_BYTES * s * h,
        tp_ok=True,
        stash_unsplit_bytes=8 * s * h,
        tp_comm_bytes=4 * FP16_BYTES * s * h,
        tp_collectives=4,
    )


def decoder(spec: TransformerSpec) -> LayeredModel:
    """The layer chain of a decoder-only transformer (per sequence of ``spec.seq`` tokens)."""
    s, h, v = float(spec.seq), float(spec.hidden), float(spec.vocab)
    tied = spec.style == "gpt"
    emb_params = v * h + (s * h if tied else 0.0)
    emb = Layer("embedding", 0.0, emb_params, FP16_BYTES * s * h, FP16_BYTES * s * h,
                tp_ok=True, stash_unsplit_bytes=FP16_BYTES * s * h,
                tp_comm_bytes=FP16_BYTES * s * h, tp_collectives=1)
    head = Layer("lm_head", 2 * s * h * v, (0.0 if tied else v * h) + 2 * h,
                 4.0 * s * v + FP16_BYTES * s * h, 0.0, tp_ok=True,
                 stash_unsplit_bytes=FP16_BYTES * s * h, tp_comm_bytes=FP16_BYTES * s * h,
                 tp_collectives=1)
    if spec.style == "llama":
        blocks = tuple(llama_block(f"block{i}", spec.hidden, spec.heads,
                                   spec.kv_heads or spec.heads, spec.ffn, spec.seq)
                       for i in range(spec.layers))
    else:
        blocks = tuple(transformer_block(f"block{i}", spec.hidden, spec.seq, spec.heads)
                       for i in range(spec.layers))
    return LayeredModel(spec.name, (emb, *blocks, head))


def vit_large(image: int = 224, patch: int = 16, classes: int = 1000) -> LayeredModel:
    """ViT-L/16: 24 blocks of hidden 1024, 16 heads, MLP 4096, over 197 tokens."""
    h, tokens = 1024, (image // patch) ** 2 + 1
    patch_in = 3 * patch * patch
    stem = Layer("patch_embed", 2.0 * (tokens - 1) * patch_in * h,
                 patch_in * h + h + tokens * h + h, FP16_BYTES * (tokens - 1) * patch_in,
                 FP16_BYTES * tokens * h)
    blocks = tuple(transformer_block(f"block{i}", h, tokens, 16) for i in range(24))
    head = Layer("head", 2.0 * h * classes, h * classes + classes + 2 * h, FP16_BYTES * h, 0.0)
    return LayeredModel("vit-l16", (stem, *blocks, head))


def train_flops_per_token(model: LayeredModel, seq: int) -> float:
    """Training FLOPs per token of a layer chain described per sequence of ``seq`` tokens."""
    return model.train_flops_per_sample / seq
