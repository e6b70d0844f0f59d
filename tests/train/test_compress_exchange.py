"""The weighted all-reduce with compression, over gloo with three ranks and uneven batches.

Each rank takes an uneven slice (7, 4, 2 samples) of the same global batch, and the ranks sum
their ``b_i/B``-weighted gradients through :func:`tessera.train.ddp.sync_gradients` with every
scheme in turn. The parent compares with the full-batch gradient computed in one process:

* ``none``: equal to 1e-12 (float64);
* ``fp16`` / ``bf16``: equal within the format's rounding (the hooks average; the runtime hands
  them ``N·b_i/B·ḡ_i`` so the average is the weighted sum -- a missing factor is off by 3×);
* ``powersgd``: plain (exact) for its first ``start`` steps, then the biases exact and the
  matrices converging to the gradient under error feedback when the same gradient repeats;
* ``3lc``: over steps, what was summed plus every rank's residual equals the sum of the
  full-batch gradients exactly (nothing lost, only delayed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from tessera.perf.compression import parse_compression  # noqa: E402
from tessera.train.compression import make_exchange  # noqa: E402
from tessera.train.ddp import sync_gradients  # noqa: E402
from tessera.train.examples import build_model, get_example, global_batch, loss_fn  # noqa: E402

pytestmark = pytest.mark.torch

SPLIT = (7, 4, 2)
SCHEMES = ("none", "fp16", "bf16", "powersgd:rank=2,start=2", "3lc")
STEPS = 6


def _local_grads(model, x, y) -> None:
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()


def _rank_main(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=len(SPLIT))
    try:
        example = get_example("mlp")
        x, y = global_batch(example, 0, 0, sum(SPLIT), torch.float64)
        lo = sum(SPLIT[:rank])
        xs, ys = x[lo:lo + SPLIT[rank]], y[lo:lo + SPLIT[rank]]
        results = {}
        for text in SCHEMES:
            model = build_model(example, 0, torch.float64)
            params = list(model.parameters())
            exchange = make_exchange(parse_compression(text), [p.shape for p in params])
            outs = []
            for _ in range(STEPS):  # the same batch every step: the same gradient repeats
                _local_grads(model, xs, ys)
                extras = sync_gradients(params, rank=rank, world_size=len(SPLIT),
                                        local_batch=SPLIT[rank], global_batch=sum(SPLIT),
                                        compute_s=0.01 * (rank + 1), local_loss=1.0,
                                        overflow=False, exchange=exchange)
                assert extras.compute_s == (0.01, 0.02, 0.03)  # the scalars stay exact
                outs.append(torch.cat([p.grad.reshape(-1).clone() for p in params]))
            residual = getattr(exchange, "residual", None)
            results[text] = {"outs": outs, "residual": residual, "bytes": extras.sent_bytes}
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("exchange")
    mp.start_processes(_rank_main, args=(_free_port(), str(out)), nprocs=len(SPLIT),
                       join=True, start_method="spawn")
    results = [torch.load(out / f"rank{r}.pt") for r in range(len(SPLIT))]
    example = get_example("mlp")
    model = build_model(example, 0, torch.float64)
    x, y = global_batch(example, 0, 0, sum(SPLIT), torch.float64)
    _local_grads(model, x, y)
    full = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    return results, full, [p.shape for p in model.parameters()]


def test_none_is_exact(ranks):
    results, full, _ = ranks
    for r in results:
        assert (r["none"]["outs"][0] - full).abs().max() < 1e-12


@pytest.mark.parametrize(("scheme", "rel"), [("fp16", 2e-3), ("bf16", 2e-2)])
def test_half_precision_is_the_full_gradient_within_rounding(ranks, scheme, rel):
    results, full, _ = ranks
    scale = float(full.abs().max())
    for r in results:
        err = float((r[scheme]["outs"][0] - full).abs().max())
        assert err <= rel * scale, (scheme, err, scale)
        assert err > 0  # it did go through 16 bits


def test_powersgd_plain_first_then_converges_with_error_feedback(ranks, ):
    results, full, shapes = ranks
    text = "powersgd:rank=2,start=2"
    outs = results[0][text]["outs"]
    for step in (0, 1):  # PyTorch's start_powerSGD_iter: plain all-reduce first
        assert (outs[step] - full).abs().max() < 1e-12
    # biases (vectors) are never compressed
    offsets, o = [], 0
    for s in shapes:
        offsets.append((o, o + s.numel(), len(s)))
        o += s.numel()
    for lo, hi, dim in offsets:
        if dim == 1:
            assert (outs[2][lo:hi] - full[lo:hi]).abs().max() < 1e-12
    # matrices: rank 2 of 16 is lossy, but the mean over steps of the same gradient converges
    first = float((outs[2] - full).norm())
    mean_err = float((torch.stack(outs[2:]).mean(0) - full).norm())
    assert first > 1e-6
    assert mean_err < 0.5 * first
    for r in results[1:]:  # every rank applies the same update
        assert torch.equal(r[text]["outs"][-1], outs[-1])


def test_threelc_loses_nothing_across_steps(ranks):
    results, full, _ = ranks
    summed = torch.stack(results[0]["3lc"]["outs"]).sum(0)
    residuals = sum(r["3lc"]["residual"] for r in results)
    assert (summed + residuals - STEPS * full).abs().max() < 1e-12
    assert (results[0]["3lc"]["outs"][0] - full).abs().max() > 1e-6  # it is lossy per step
    for r in results[1:]:
        assert torch.equal(r["3lc"]["outs"][-1], results[0]["3lc"]["outs"][-1])


def test_bytes_sent_shrink_with_compression(ranks):
    results, _, _ = ranks
    b = {s: results[0][s]["bytes"] for s in SCHEMES}
    fp32 = 8 * (16 * 32 + 32 + 32 * 4 + 4 + 3 + 3)  # float64 buffer with the 6 scalars
    assert b["none"] == fp32
    assert b["fp16"] == 2 * (676) + 8 * 6 == b["bf16"]
    # biases and the 4×32 head go plain (rank 2 would not halve it); 32×16 as P 32×2, Q 16×2
    assert b["powersgd:rank=2,start=2"] == 8 * (32 + 4 + 4 * 32 + 32 * 2 + 16 * 2) + 8 * 6
    assert b["powersgd:rank=2,start=2"] < b["none"]
    assert b["3lc"] < b["fp16"]
