"""Our PowerSGD (:mod:`tessera.train.powersgd`) against PyTorch's ``powerSGD_hook``.

In a process group of one rank (the collectives are then the identity, so the test is the
arithmetic: error feedback, warm start, first factors, orthogonalisation, the exact vectors),
both run the same steps on the same random buffers in float64 and must agree to rounding: the
products run in another order, nothing else differs. The state a checkpoint
keeps must let a fresh object continue bit-identically.
"""

from __future__ import annotations

import math
import os
import socket

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook  # noqa: E402

from tessera.train.compression import FlatBucket  # noqa: E402
from tessera.train.powersgd import PowerSgd  # noqa: E402

pytestmark = pytest.mark.torch

# compressed: 32×24 and 24×(4·5) at rank 3; exact: a vector and a matrix too thin to pay 2×
SHAPES = [torch.Size(s) for s in ((32, 24), (6,), (24, 4, 5), (3, 32))]
RANK, START, STEPS = 3, 2, 7


@pytest.fixture(scope="module")
def group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    n = sum(s.numel() for s in SHAPES)
    return [torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(STEPS)]


@pytest.mark.parametrize("rank", [2, 3])  # the hook orthogonalises by Gram-Schmidt at r ≤ 2
def test_same_results_as_pytorchs_hook_to_rounding(group, rank):
    ours = PowerSgd(SHAPES, rank, START)
    assert [(m.n, m.m) for m in ours.matrices] == [(32, 24), (24, 20)]
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                        start_powerSGD_iter=START, use_error_feedback=True,
                                        warm_start=True)
    for step, x in enumerate(_inputs()):
        mine = ours.reduce_mean(x.clone(), 1)
        theirs = powerSGD_hook.powerSGD_hook(state, FlatBucket(x.clone(), SHAPES)).wait()
        if step < START:
            assert torch.equal(mine, x)  # plain steps: exact
            continue
        assert not torch.allclose(mine, x)  # compressed: lossy
        scale = float(theirs.abs().max())
        assert float((mine - theirs).abs().max()) < 1e-10 * scale, step
        err = state.error_dict[0]
        assert ours.error is not None
        assert float((ours.error - err).abs().max()) < 1e-10 * float(err.abs().max()), step


def test_checkpointed_state_continues_bit_identically(group):
    inputs = _inputs()
    straight = PowerSgd(SHAPES, RANK, START)
    outs = [straight.reduce_mean(x.clone(), 1) for x in inputs]
    first = PowerSgd(SHAPES, RANK, START)
    for x in inputs[:4]:
        first.reduce_mean(x.clone(), 1)
    resumed = PowerSgd(SHAPES, RANK, START)
    resumed.load_state_dict(first.state_dict(), torch.device("cpu"))
    for x, out in zip(inputs[4:], outs[4:], strict=True):
        assert torch.equal(resumed.reduce_mean(x.clone(), 1), out)
    fresh = PowerSgd(SHAPES, RANK, START)  # without the state: not the same run
    fresh.iter = 4
    assert not torch.equal(fresh.reduce_mean(inputs[4].clone(), 1), outs[4])


def test_plan_follows_the_two_times_rule():
    psgd = PowerSgd([torch.Size((2048, 2048)), torch.Size((4, 2048)), torch.Size((2048,))], 4, 2)
    assert [(m.n, m.m, m.r) for m in psgd.matrices] == [(2048, 2048, 4)]
    assert psgd.wire_elements() == (4 * 2048 + 2048, 2048 * 4, 2048 * 4)
    assert psgd.numel == sum(math.prod(s) for s in ((2048, 2048), (4, 2048), (2048,)))
