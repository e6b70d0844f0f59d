"""Compression state in checkpoints, and ``--fail-at`` outside synchronous steps.

* PowerSGD's and 3LC's error feedback is per rank and evolves every step: a checkpoint keeps
  every rank's, and a run that dies and resumes continues bit-identically to one that never
  died (over gloo, two ranks, the small ``mlp``). Without the state the resumed run restarts
  its error feedback at zero and ends elsewhere.
* ``--fail-at`` only acts in the synchronous step: with ``--coded`` or ``--staleness`` it is
  refused before any rank starts (exit 2, one line).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from tessera.errors import SpecError  # noqa: E402
from tessera.perf.compression import parse_compression  # noqa: E402
from tessera.train.checkpoint import (  # noqa: E402
    TrainState,
    load_checkpoint,
    model_state_equal,
    parameters_of,
    save_checkpoint,
)
from tessera.train.compression import make_exchange, restore_state  # noqa: E402
from tessera.train.config import FailAt, TrainConfig  # noqa: E402
from tessera.train.emulation import EmulationConfig  # noqa: E402
from tessera.train.launcher import TrainingFailedError, launch  # noqa: E402

pytestmark = pytest.mark.torch

SHAPES = [torch.Size((16, 12)), torch.Size((12,))]
CPU = torch.device("cpu")


def _grads(steps: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(16 * 12 + 12, generator=gen, dtype=torch.float64) for _ in range(steps)]


def test_threelc_state_round_trip_continues_the_same_messages():
    grads = _grads(6)
    straight = make_exchange(parse_compression("3lc"), SHAPES)
    messages = [straight.encode(g.clone())[0] for g in grads]  # type: ignore[union-attr]
    first = make_exchange(parse_compression("3lc"), SHAPES)
    for g in grads[:3]:
        first.encode(g.clone())  # type: ignore[union-attr]
    resumed = make_exchange(parse_compression("3lc"), SHAPES)
    assert restore_state(resumed, [first.state_dict()], 0, 1, CPU) is None  # type: ignore[union-attr]
    for g, m in zip(grads[3:], messages[3:], strict=True):
        assert torch.equal(resumed.encode(g.clone())[0], m)  # type: ignore[union-attr]
    fresh = make_exchange(parse_compression("3lc"), SHAPES)  # zero residual: other messages
    assert not torch.equal(fresh.encode(grads[3].clone())[0], messages[3])  # type: ignore[union-attr]


def test_restore_says_why_it_cannot():
    ex = make_exchange(parse_compression("3lc"), SHAPES)
    state = ex.state_dict()  # type: ignore[union-attr]
    assert "holds no compression state" in str(restore_state(ex, None, 0, 2, CPU))
    assert "checkpoint has 1 ranks, this run 2" in str(restore_state(ex, [state], 0, 2, CPU))
    other = make_exchange(parse_compression("powersgd:rank=2"), SHAPES)
    assert "is for 3lc" in str(restore_state(other, [state], 0, 1, CPU))
    assert restore_state(make_exchange(parse_compression("fp16"), SHAPES), None, 0, 2, CPU) \
        is None  # nothing to restore


def test_checkpoint_file_keeps_the_ranks_states(tmp_path):
    states = [{"scheme": "3lc", "residual": torch.arange(3.0)}, {"scheme": "3lc",
                                                                 "residual": None}]
    save_checkpoint(tmp_path, TrainState(2, {}, {}, {"split": [1, 1], "global_batch": 2}, 1.0,
                                         [], 4, 2, 2, states))
    loaded = load_checkpoint(tmp_path)
    assert loaded is not None and loaded.exchange is not None
    assert torch.equal(loaded.exchange[0]["residual"], torch.arange(3.0))
    assert loaded.exchange[1]["residual"] is None


def _cfg(compress: str, **kw):
    base = dict(example="mlp", devices="T4:2", global_batch=8, steps=7, split="fixed",
                fixed_split=(5, 3), dtype="float64", checkpoint_every=3, compress=compress,
                emulation=EmulationConfig(overhead_s=0.0, per_sample_s=0.0002))
    return TrainConfig(**(base | kw))


@pytest.mark.slow
@pytest.mark.parametrize("compress", ["powersgd:rank=2,start=2", "3lc"])
def test_resumed_compressed_run_is_bit_identical(tmp_path, compress):
    straight = launch(_cfg(compress), run_dir=tmp_path / "straight", timeout_s=240)
    crashed = tmp_path / "crashed"
    with pytest.raises(TrainingFailedError):  # dies in step 5, after the checkpoint at 3
        launch(_cfg(compress, fail_at=FailAt(step=5, rank=1)), run_dir=crashed,
               timeout_s=240)
    state = load_checkpoint(crashed / "checkpoints")
    assert state is not None and state.next_step == 3 and state.exchange is not None
    assert [s["scheme"] for s in state.exchange] == [str(parse_compression(compress))] * 2
    resumed = launch(_cfg(compress), run_dir=crashed, timeout_s=240)
    assert [r["step"] for r in resumed.log] == list(range(7))
    assert [r["loss"] for r in resumed.log] == [r["loss"] for r in straight.log]
    assert model_state_equal(parameters_of(crashed / "checkpoints"),
                             parameters_of(tmp_path / "straight" / "checkpoints"))


@pytest.mark.parametrize("mode", [dict(coded=True), dict(staleness=2)])
def test_fail_at_is_refused_outside_synchronous_steps(mode):
    with pytest.raises(SpecError, match="--fail-at injects a fault into the synchronous step"):
        TrainConfig("mlp", "T4:3", global_batch=12, fail_at=FailAt(step=2, rank=1), **mode)
    TrainConfig("mlp", "T4:3", global_batch=12, fail_at=FailAt(step=2, rank=1))  # sync: fine


def test_cli_refuses_fail_at_with_coded_before_any_rank_starts():
    proc = subprocess.run([sys.executable, "-m", "tessera", "train", "mlp", "--devices", "T4:3",
                           "--coded", "--fail-at", "2:1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--fail-at" in lines[0] and "coded" in lines[0], proc.stderr
    assert "step " not in proc.stdout  # no rank ran a step
