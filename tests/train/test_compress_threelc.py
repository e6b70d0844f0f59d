"""3LC against a plain reference written here from the paper's description (Lim et al.,
MLSys'19): 3-value quantisation, five trits per byte in base 3, runs of 2..14 zero bytes (121)
as bytes 243..255, and the residual carried into the next step."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tessera.perf.compression import CompressionSpec, wire_collectives  # noqa: E402
from tessera.train import threelc  # noqa: E402
from tessera.train.compression import ThreeLcExchange  # noqa: E402

pytestmark = pytest.mark.torch


def ref_quantize(values: list[float], s: float = 1.0) -> tuple[list[int], float]:
    m = float(torch.tensor(max(abs(v) for v in values) * s, dtype=torch.float32))
    if m == 0:
        return [0] * len(values), 0.0
    # ±1 from |v| = M/2 on: trunc(v · 2/M), clamped (the rounding of the paper, half away
    # from zero)
    return [max(-1, min(1, math.trunc(v * (2 / m)))) for v in values], m


def ref_quartic(trits: list[int]) -> list[int]:
    padded = trits + [0] * (-len(trits) % 5)
    out = []
    for i in range(0, len(padded), 5):
        out.append(sum((t + 1) * 3**j for j, t in enumerate(padded[i:i + 5])))
    return out


def ref_zre(data: list[int]) -> list[int]:
    out, i = [], 0
    while i < len(data):
        if data[i] != 121:
            out.append(data[i])
            i += 1
            continue
        run = 1
        while i + run < len(data) and data[i + run] == 121 and run < 14:
            run += 1
        out.append(121 if run == 1 else 243 + run - 2)
        i += run
    return out


def ref_unzre(data: list[int]) -> list[int]:
    out = []
    for b in data:
        out += [121] * (b - 241) if b >= 243 else [b]
    return out


def _sparse_gradient(gen: torch.Generator, n: int) -> torch.Tensor:
    """Mostly small values with a few large ones, like a gradient: long zero-trit runs."""
    g = torch.randn(n, generator=gen, dtype=torch.float64) * 0.01
    spikes = torch.randint(0, n, (max(1, n // 50),), generator=gen)
    g[spikes] = torch.randn(len(spikes), generator=gen, dtype=torch.float64)
    return g


@pytest.mark.parametrize("n", [1, 4, 5, 6, 69, 70, 71, 5 * 14 * 3 + 2, 1000, 4097])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_encode_matches_reference_and_round_trips(n, seed):
    gen = torch.Generator().manual_seed(seed * 1000 + n)
    g = _sparse_gradient(gen, n) if seed != 2 else torch.randn(n, generator=gen,
                                                               dtype=torch.float64)
    scale, payload, trits = threelc.encode(g)
    ref_trits, ref_scale = ref_quantize(g.tolist())
    assert trits.tolist() == ref_trits and scale == ref_scale
    packed = ref_quartic(ref_trits)
    assert len(packed) == math.ceil(n / 5)
    assert payload.tolist() == ref_zre(packed)
    assert ref_unzre(payload.tolist()) == packed
    # exact round trip of the quantised values
    decoded = threelc.decode(scale, payload, n, torch.float64)
    assert decoded.tolist() == [t * ref_scale for t in ref_trits]


def test_zero_runs_are_cut_at_fourteen_and_single_zero_bytes_stay():
    data = [121] * 30 + [5] + [121] + [7] + [121] * 2
    expected = [255, 255, 243, 5, 121, 7, 243]  # 14, 14, 2 | 5 | single | 7 | run of 2
    assert ref_zre(data) == expected
    assert threelc.zre_encode(torch.tensor(data, dtype=torch.uint8)).tolist() == expected
    assert threelc.zre_decode(torch.tensor(expected, dtype=torch.uint8)).tolist() == data


@pytest.mark.parametrize("seed", range(5))
def test_zero_run_encoding_matches_the_reference_on_random_runs(seed):
    """Runs of every length around the cuts (0..45: 1, 14, 15, 28, 29 included), at both
    ends of the data, between random other bytes."""
    gen = torch.Generator().manual_seed(seed)
    data: list[int] = []
    for _ in range(60):
        data += [121] * int(torch.randint(0, 46, (1,), generator=gen))
        data += torch.randint(0, 121, (int(torch.randint(0, 3, (1,), generator=gen)),),
                              generator=gen).tolist()
    packed = torch.tensor(data, dtype=torch.uint8)
    assert threelc.zre_encode(packed).tolist() == ref_zre(data)
    assert threelc.zre_decode(threelc.zre_encode(packed)).tolist() == data


def test_all_zero_tensor_has_scale_zero_and_one_run_per_fourteen_bytes():
    scale, payload, _ = threelc.encode(torch.zeros(5 * 28))
    assert scale == 0.0 and payload.tolist() == [255, 255]


def test_sparsity_multiplier_zeroes_more():
    g = torch.linspace(-1, 1, 101, dtype=torch.float64)
    dense, _ = threelc.quantize(g, 1.0)
    sparse, m = threelc.quantize(g, 1.9)
    assert int(sparse.abs().sum()) < int(dense.abs().sum())
    assert sparse.tolist() == ref_quantize(g.tolist(), 1.9)[0] and m == pytest.approx(1.9)


def test_residual_is_carried_to_the_next_step():
    """What one step fails to send is added to the next step's gradient (error feedback):
    the sum of the sent values over steps plus the last residual equals the sum of the
    gradients."""
    shapes = [torch.Size([7, 9]), torch.Size([9])]
    ex = ThreeLcExchange(CompressionSpec("3lc"), shapes)
    gen = torch.Generator().manual_seed(3)
    total_in = torch.zeros(72, dtype=torch.float64)
    total_sent = torch.zeros(72, dtype=torch.float64)
    previous = torch.zeros(72, dtype=torch.float64)
    for _ in range(4):
        g = _sparse_gradient(gen, 72)
        message, sent = ex.encode(g)
        sent_flat = sent.clone()
        acc = g + previous
        ref = []
        for lo, hi in ((0, 63), (63, 72)):
            trits, m = ref_quantize(acc[lo:hi].tolist())
            ref += [t * m for t in trits]
        assert sent_flat.tolist() == ref
        assert torch.equal(ex.residual, acc - sent_flat)
        assert torch.equal(ex.decode(message, torch.float64), sent_flat)
        previous = ex.residual.clone()
        total_in += g
        total_sent += sent_flat
    assert torch.allclose(total_sent + ex.residual, total_in, atol=1e-12)


def test_message_bytes_follow_the_paper_and_stay_under_the_planner_bound():
    shapes = [torch.Size([40, 50]), torch.Size([50])]
    ex = ThreeLcExchange(CompressionSpec("3lc"), shapes)
    g = _sparse_gradient(torch.Generator().manual_seed(0), 2050)
    message, _ = ex.encode(g)
    expected = 0
    for lo, hi in ((0, 2000), (2000, 2050)):
        trits, _ = ref_quantize(g[lo:hi].tolist())
        expected += 8 + len(ref_zre(ref_quartic(trits)))
    assert message.numel() == expected
    bound = wire_collectives(CompressionSpec("3lc"), shapes)[0].bytes_per_rank
    assert bound == 8 * 2 + 400 + 10
    assert message.numel() < bound  # zero runs only shrink the quartic bytes
