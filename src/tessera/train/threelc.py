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


def quantize(acc: torch.Tensor, sparsity: float = 1.0, out: torch.Tensor | None = None,
             scratch: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
    """Three-value quantisation: the trits (in ``acc``'s float dtype, values −1, 0, 1) and
    the scale ``M``.

    ``acc`` already includes the residual. An element's trit is ``clamp(trunc(a · 2/M), −1, 1)``:
    ±1 when ``|a| ≥ M/2`` (rounding half away from zero), else 0. ``M`` is rounded to fp32, the
    precision it is sent in, so the sender's residual matches what receivers read. An all-zero
    tensor has scale 0. The trits stay floats: on CPUs the float passes are several times faster
    than int8 ones, and every later step (packing, residual, sum) is float arithmetic.

    ``out`` (flat, ``acc``'s size and dtype) receives the trits in place of a new tensor: a
    runtime that keeps it across steps saves a large allocation (and its page faults) per step;
    ``scratch`` (int8, at least ``acc``'s size) likewise for the truncation. The truncation is
    a conversion to int8 and back after clamping to ``[−1, 1]`` (float-to-integer conversion
    rounds toward zero): the same trits as ``torch.trunc``, in less than half its time here.
    """
    flat = acc.reshape(-1)
    if flat.numel():
        lo, hi = torch.aminmax(flat)
        scale = max(-float(lo), float(hi)) * sparsity
    else:
        scale = 0.0
    scale = float(torch.tensor(scale, dtype=torch.float32))
    if out is None:
        out = torch.empty_like(flat)
    if scale == 0.0:
        return out.zero_(), 0.0
    torch.mul(flat, 2.0 / scale, out=out)
    out.clamp_(-1.0, 1.0)
    ints = (torch.empty(flat.numel(), dtype=torch.int8, device=flat.device) if scratch is None
            else scratch[:flat.numel()])
    ints.copy_(out)  # trunc: −1 < x < 1 becomes 0, ±1 stays
    return out.copy_(ints), scale


def dequantize(trits: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """The values the receiver reads: ``q · M``."""
    return trits.to(dtype) * scale


def quartic_encode(trits: torch.Tensor) -> torch.Tensor:
    """Pack trits five to a byte (base 3, first trit least significant); pad with zeros.

    ``Σ (q_j + 1) · 3^j = Σ q_j · 3^j + 121``: one small matrix-vector product over the whole
    groups (a view, no copy), and the last, partial group on its own.
    """
    flat = trits.reshape(-1)
    if flat.dtype not in (torch.float32, torch.float64):
        flat = flat.to(torch.float32)  # integer sums up to ±121 are exact in either
    whole = flat.numel() - flat.numel() % TRITS_PER_BYTE
    powers = _POWERS.to(device=flat.device, dtype=flat.dtype)
    packed = flat[:whole].view(-1, TRITS_PER_BYTE) @ powers
    if whole < flat.numel():
        tail = flat[whole:] @ powers[:flat.numel() - whole]
        packed = torch.cat([packed, tail.reshape(1)])
    return packed.add_(ZERO_GROUP_BYTE).to(torch.uint8)


def _decode_table() -> torch.Tensor:
    values = torch.arange(256, dtype=torch.float32).unsqueeze(1)
    return torch.div(values, _POWERS, rounding_mode="floor") % 3 - 1


_DECODE_TABLE = _decode_table()
"""Row ``b``: the five trits of byte ``b`` (rows 243..255 are never looked up)."""


def quartic_decode(packed: torch.Tensor, n: int, dtype: torch.dtype = torch.float32,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """Unpack :func:`quartic_encode`'s bytes into the first ``n`` trits (as ``dtype``): one
    row lookup per byte. ``out`` (``5 × len(packed)`` elements of ``dtype``) is filled in place
    of a new tensor."""
    table = _DECODE_TABLE.to(device=packed.device, dtype=dtype)
    if out is None:
        out = torch.empty(packed.numel() * TRITS_PER_BYTE, dtype=dtype, device=packed.device)
    torch.index_select(table, 0, packed.to(torch.int64),
                       out=out.view(-1, TRITS_PER_BYTE))
    return out[:n]


def zre_encode(packed: torch.Tensor) -> torch.Tensor:
    """Zero-run encoding: runs of 2..14 zero-group bytes become one byte ``241 + run``.

    A run longer than 14 is cut into pieces of 14 from its start; a piece of one byte stays 121.

    Built from the *other* bytes, which are few in a sparse gradient: the gap before each of
    them is a zero run, written as ``⌈L/14⌉ − 1`` pieces of 14 (byte 255) and one last piece
    of the rest, then the byte itself; the run after the last one closes the message.
    """
    other = torch.nonzero(packed != ZERO_GROUP_BYTE).reshape(-1)
    device = packed.device
    ends = torch.cat([other, torch.tensor([packed.numel()], device=device)])
    gaps = torch.diff(ends, prepend=torch.tensor([-1], device=device)).sub_(1)  # run lengths
    pieces = torch.div(gaps + (MAX_RUN - 1), MAX_RUN, rounding_mode="floor")
    starts = torch.cumsum(pieces + 1, 0).sub_(pieces + 1)  # each run's pieces, then its byte
    # One spare byte at the end: a run of length 0 writes its (unused) token where its byte
    # goes (overwritten below), the last one past the message.
    out = torch.full((int(starts[-1] + pieces[-1]) + 1,), RUN_BASE + MAX_RUN - 2,
                     dtype=torch.uint8, device=device)
    last = gaps.sub_(MAX_RUN * (pieces - 1))  # the last piece's length, 1..14 (14: no run)
    tokens = torch.where(last == 1, ZERO_GROUP_BYTE, last.add_(RUN_BASE - 2))
    ran = (pieces > 0).to(pieces.dtype)
    out[starts.add_(pieces).sub_(ran)] = tokens.to(torch.uint8)
    out[starts[:-1].add_(ran[:-1])] = packed[other]
    return out[:-1]


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
