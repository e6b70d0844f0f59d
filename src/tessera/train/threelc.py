"""3LC: three-value gradient compression (Lim, Andersen and Kaminsky, MLSys'19).

One tensor ``g`` of a rank's gradient is sent in three stages, each exactly invertible except the
first:

1. **3-value quantisation with error feedback.** The rank adds what it failed to send last step
   (the residual ``e``): ``a = g + e``. With the scale ``M = s · max|a|`` (``s``, the *sparsity
   multiplier*, in ``[1, 2)``) every element becomes a *trit* ``q = round(a / M)`` in
   ``{−1, 0, 1}`` (half away from zero: ``±1`` from ``|a| = M/2`` on); the receiver reads
   ``q · M``. The new residual ``e = a − q · M`` goes into the
   next step, so nothing is lost, only delayed.
2. **Quartic encoding.** Five trits shifted to ``{0, 1, 2}`` make one base-3 number
   ``d₀ + 3d₁ + 9d₂ + 27d₃ + 81d₄`` in ``0..242``: one byte per five elements (1.6 bits each).
   The last group is padded with zero trits.
3. **Zero-run encoding.** Gradients are mostly zero trits after quantisation, and five zero trits
   are the byte 121. Bytes 243..255 are unused by stage 2, so a run of 2..14 consecutive 121s
   becomes the single byte ``243 + (run − 2)``; longer runs are cut into pieces of 14.

A tensor's message is its scale (fp32) and its stage-3 bytes. The functions here are vectorised
torch on the gradient's device; ``tests/train/test_compress_threelc.py`` checks them against a
plain-Python reference.
"""

from __future__ import annotations

import torch

TRITS_PER_BYTE = 5
ZERO_GROUP_BYTE = 121
"""Five zero trits (each shifted to 1): ``1 + 3 + 9 + 27 + 81``."""
RUN_BASE = 243
"""Bytes ``243 + (k − 2)`` stand for runs of ``k`` zero-group bytes, ``k`` in 2..14."""
MAX_RUN = 14
_POWERS = torch.tensor([1.0, 3.0, 9.0, 27.0, 81.0])


def quantize(acc: torch.Tensor, sparsity: float = 1.0) -> tuple[torch.Tensor, float]:
    """Three-value quantisation: the trits (in ``acc``'s float dtype, values −1, 0, 1) and
    the scale ``M``.

    ``acc`` already includes the residual. An element's trit is ``clamp(trunc(a · 2/M), −1, 1)``:
    ±1 when ``|a| ≥ M/2`` (rounding half away from zero), else 0. ``M`` is rounded to fp32, the
    precision it is sent in, so the sender's residual matches what receivers read. An all-zero
    tensor has scale 0. The trits stay floats: on CPUs the float passes are several times faster
    than int8 ones, and every later step (packing, residual, sum) is float arithmetic.
    """
    flat = acc.reshape(-1)
    if flat.numel():
        lo, hi = torch.aminmax(flat)
        scale = max(-float(lo), float(hi)) * sparsity
    else:
        scale = 0.0
    scale = float(torch.tensor(scale, dtype=torch.float32))
    if scale == 0.0:
        return torch.zeros_like(flat), 0.0
    return torch.clamp_(torch.trunc(flat * (2.0 / scale)), -1.0, 1.0), scale


def dequantize(trits: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """The values the receiver reads: ``q · M``."""
    return trits.to(dtype) * scale


def quartic_encode(trits: torch.Tensor) -> torch.Tensor:
    """Pack trits five to a byte (base 3, first trit least significant); pad with zeros.

    ``Σ (q_j + 1) · 3^j = Σ q_j · 3^j + 121``: one small matrix-vector product.
    """
    n = trits.numel()
    pad = -n % TRITS_PER_BYTE
    flat = trits.reshape(-1).to(torch.float32)
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    powers = _POWERS.to(flat.device)
    return (flat.view(-1, TRITS_PER_BYTE) @ powers + ZERO_GROUP_BYTE).to(torch.uint8)


def _decode_table() -> torch.Tensor:
    values = torch.arange(256, dtype=torch.float32).unsqueeze(1)
    return torch.div(values, _POWERS, rounding_mode="floor") % 3 - 1


_DECODE_TABLE = _decode_table()
"""Row ``b``: the five trits of byte ``b`` (rows 243..255 are never looked up)."""


def quartic_decode(packed: torch.Tensor, n: int, dtype: torch.dtype = torch.float32
                   ) -> torch.Tensor:
    """Unpack :func:`quartic_encode`'s bytes into the first ``n`` trits (as ``dtype``): one
    row lookup per byte."""
    rows = _DECODE_TABLE.to(packed.device).index_select(0, packed.to(torch.int64))
    return rows.reshape(-1)[:n].to(dtype)


def zre_encode(packed: torch.Tensor) -> torch.Tensor:
    """Zero-run encoding: runs of 2..14 zero-group bytes become one byte ``241 + run``.

    A run longer than 14 is cut into pieces of 14 from its start; a piece of one byte stays 121.
    """
    is_zero = packed == ZERO_GROUP_BYTE
    if not bool(is_zero.any()):
        return packed.clone()
    edge = torch.zeros(1, dtype=torch.int8, device=packed.device)
    edges = torch.diff(is_zero.to(torch.int8), prepend=edge, append=edge)
    starts = torch.nonzero(edges == 1).reshape(-1)
    lengths = torch.nonzero(edges == -1).reshape(-1) - starts
    pieces = (lengths + MAX_RUN - 1) // MAX_RUN
    run_of_piece = torch.repeat_interleave(torch.arange(len(starts), device=packed.device),
                                           pieces)
    first_piece = torch.cumsum(pieces, 0) - pieces
    k = torch.arange(len(run_of_piece), device=packed.device) - first_piece[run_of_piece]
    piece_start = starts[run_of_piece] + MAX_RUN * k
    piece_len = torch.clamp(lengths[run_of_piece] - MAX_RUN * k, max=MAX_RUN)
    tokens = torch.where(piece_len == 1, ZERO_GROUP_BYTE, RUN_BASE - 2 + piece_len)
    values = packed.clone()
    values[piece_start] = tokens.to(torch.uint8)
    keep = ~is_zero
    keep[piece_start] = True
    return values[keep]


def zre_decode(encoded: torch.Tensor) -> torch.Tensor:
    """Expand :func:`zre_encode`'s run bytes back into zero-group bytes."""
    values = encoded.to(torch.int64)
    is_run = values >= RUN_BASE
    counts = torch.where(is_run, values - (RUN_BASE - 2), torch.ones_like(values))
    bytes_ = torch.where(is_run, torch.full_like(values, ZERO_GROUP_BYTE), values)
    return torch.repeat_interleave(bytes_, counts).to(torch.uint8)


def encode(acc: torch.Tensor, sparsity: float = 1.0
           ) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Stages 1-3 for one tensor: (scale, wire bytes, the trits the receiver will read)."""
    trits, scale = quantize(acc, sparsity)
    return scale, zre_encode(quartic_encode(trits)), trits


def decode(scale: float, payload: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of :func:`encode` (up to quantisation): ``n`` values of ``dtype``."""
    return quartic_decode(zre_decode(payload), n, dtype) * scale
