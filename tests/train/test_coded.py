"""Gradient coding: any k of n ranks' coded gradients decode to the full-batch gradient.

The exactness property of ``--coded`` (issue 37, part 2): over gloo, every rank computes its
coded gradient with the runtime's own code (:class:`~tessera.train.coded_step.CodedStepper`),
and for *every* subset of k ranks the decoded gradient and loss equal a single-process step on
the same samples. A run with injected stragglers then trains exactly like single-process
training while its steps end without the stragglers.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

from tessera.errors import SpecError  # noqa: E402
from tessera.train.balancer import OnlineBalancer  # noqa: E402
from tessera.train.checkpoint import parameters_of  # noqa: E402
from tessera.train.coded import (  # noqa: E402
    build_code,
    check_code,
    partition_sizes,
    rank_load,
)
from tessera.train.coded_step import CodedStepper  # noqa: E402
from tessera.train.config import TrainConfig  # noqa: E402
from tessera.train.ddp import LossScaler, flat_gradient  # noqa: E402
from tessera.train.devices import Precision  # noqa: E402
from tessera.train.emulation import EmulationConfig  # noqa: E402
from tessera.train.examples import build_model, get_example, loss_fn, sample_range  # noqa: E402
from tessera.train.launcher import launch  # noqa: E402
from tessera.train.p2p_step import weighted_gradient  # noqa: E402
from tessera.train.worker import make_optimizer, reference_training  # noqa: E402

N = 4
BATCH = 11  # not a multiple of 4: unequal partitions
START = 37  # the step starts mid-stream
TOL = 1e-12


@dataclass
class _Run:
    """The part of a rank's state a coded step reads (the worker's ``_Run`` has the same)."""

    cfg: TrainConfig
    rank: int
    world_size: int
    model: torch.nn.Module
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    precision: Precision = Precision.FP32
    example: object = None
    optimizer: object = None
    balancer: object = None
    scaler: LossScaler = field(default_factory=lambda: LossScaler(enabled=False))
    emulator: object = None
    samples: int = START


def _make_run(cfg: TrainConfig, rank: int) -> _Run:
    example = get_example(cfg.example)
    model = build_model(example, cfg.seed, torch.float64)
    run = _Run(cfg, rank, cfg.world_size, model, example=example,
               optimizer=make_optimizer(model, cfg),
               balancer=OnlineBalancer(cfg.global_batch, cfg.initial_split(), cfg.balancer))
    return run


def _reference(cfg: TrainConfig) -> tuple[torch.Tensor, float]:
    """The single-process gradient and loss on samples [START, START + BATCH)."""
    example = get_example(cfg.example)
    model = build_model(example, cfg.seed, torch.float64)
    x, y = sample_range(example, cfg.seed, START, BATCH, torch.float64)
    loss = loss_fn(model(x), y)
    loss.backward()
    return flat_gradient(list(model.parameters())), float(loss)


def _rank_main(rank: int, port: int, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=N)
    report: dict[str, object] = {}
    try:
        for k in range(1, N):
            cfg = TrainConfig("mlp", f"A100:{N}", global_batch=BATCH, dtype="float64", seed=5,
                              coded=True, code_k=k)
            run = _make_run(cfg, rank)
            stepper = CodedStepper(run)
            grad, loss, _ = weighted_gradient(run, stepper.pieces(rank))
            mine = torch.cat([grad, torch.tensor([loss], dtype=torch.float64)])
            everyone = [torch.zeros_like(mine) for _ in range(N)]
            dist.all_gather(everyone, mine)
            if rank != 0:
                continue
            ref_grad, ref_loss = _reference(cfg)
            errors = []
            for subset in itertools.combinations(range(N), k):
                weights = stepper.code.decode_weights(list(subset))
                decoded = sum(w * everyone[r] for r, w in zip(subset, weights, strict=True))
                errors.append(max(float((decoded[:-1] - ref_grad).abs().max()),
                                  abs(float(decoded[-1]) - ref_loss)))
            report[str(k)] = {"scheme": stepper.code.scheme, "subsets": len(errors),
                              "max_error": max(errors),
                              "grad_norm": float(ref_grad.norm())}
        if rank == 0:
            Path(out).write_text(json.dumps(report))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.torch
def test_every_k_subset_decodes_to_the_single_process_gradient_over_gloo(tmp_path):
    out = tmp_path / "report.json"
    mp.spawn(_rank_main, args=(_free_port(), str(out)), nprocs=N, join=True)
    report = json.loads(out.read_text())
    assert set(report) == {"1", "2", "3"}
    for k in (1, 2, 3):
        r = report[str(k)]
        assert r["subsets"] == math.comb(N, k)
        assert r["grad_norm"] > 1e-3  # a real gradient, not zeros
        assert r["max_error"] < TOL, (k, r)
    # Both constructions are exercised: 2 | 4 and 4 | 4 repeat fractions, 3 ∤ 4 is cyclic.
    assert [report[k]["scheme"] for k in ("1", "2", "3")] == [
        "fractional-repetition", "cyclic-mds", "fractional-repetition"]


@pytest.mark.torch
def test_a_single_rank_result_or_a_wrong_subset_does_not_decode():
    code = build_code(4, 3)
    with pytest.raises(ValueError, match="needs 3 distinct ranks"):
        code.decode_weights([0, 1])
    with pytest.raises(ValueError, match="needs 3 distinct ranks"):
        code.decode_weights([0, 1, 1])


@pytest.mark.torch
@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_every_code_decodes_from_every_k_subset(n):
    for k in range(1, n):
        code = build_code(n, k)
        check_code(code)
        # Each rank computes s + 1 = n - k + 1 partitions (the price of tolerating s).
        assert all(len(code.support(r)) == n - k + 1 for r in range(n))
        if code.scheme == "fractional-repetition":
            for subset in itertools.combinations(range(n), k):
                assert set(code.decode_weights(subset)) <= {0.0, 1.0}


def test_bad_codes_are_refused():
    with pytest.raises(SpecError, match="1 ≤ k ≤ n"):
        build_code(3, 4)
    with pytest.raises(SpecError, match="1 ≤ k ≤ n"):
        build_code(3, 0)


def test_partitions_cover_the_batch():
    assert partition_sizes(11, 4) == (3, 3, 3, 2)
    code = build_code(4, 3)
    assert sum(rank_load(code, 11, r) for r in range(4)) == 2 * 11


@pytest.mark.torch
@pytest.mark.slow
def test_a_coded_run_with_stragglers_trains_exactly_and_does_not_wait(tmp_path):
    """End to end over gloo: 3 ranks, any 2 decide; stragglers 20× slower are left behind."""
    cfg = TrainConfig(
        "mlp", "A100:3", global_batch=13, steps=6, split="equal", dtype="float64",
        stragglers=0.4, straggler_factor=20.0, seed=3, coded=True, code_k=2,
        emulation=EmulationConfig(overhead_s=0.0, per_sample_s=0.002), checkpoint_every=0)
    result = launch(cfg, run_dir=tmp_path, timeout_s=240)
    got = parameters_of(tmp_path / "checkpoints")
    ref = reference_training(cfg).state_dict()
    assert max(float((got[k] - ref[k]).abs().max()) for k in ref) < 1e-9
    used = [tuple(r["coded"]["used"]) for r in result.log]
    assert len(set(used)) >= 2  # different ranks decided different steps
    left_behind = [r for r in result.log
                   if set(r["coded"]["late"]) <= set(r["stragglers"])
                   and not set(r["coded"]["used"]) & set(r["stragglers"])
                   and r["stragglers"]]
    assert left_behind, [(r["stragglers"], r["coded"]) for r in result.log]
    assert result.summary()["step_mode"] == "coded"
