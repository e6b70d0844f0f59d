"""Faults and exact resume.

* A rank that dies mid-step fails the job with an error that names the rank and the checkpoint.
* Rerunning resumes from that checkpoint and ends with bit-identical parameters to a run that
  never crashed (fixed split, so the floating-point summation order is the same too).
* Under an elastic restart (``max_restarts``, like torchrun) the group restarts by itself; with
  online rebalancing on, the result still matches single-process training.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessera.train.checkpoint import model_state_equal, parameters_of  # noqa: E402
from tessera.train.config import FailAt, TrainConfig  # noqa: E402
from tessera.train.emulation import EmulationConfig  # noqa: E402
from tessera.train.launcher import TrainingFailedError, launch  # noqa: E402
from tessera.train.worker import reference_training  # noqa: E402

EMULATION = EmulationConfig(overhead_s=0.0, per_sample_s=0.0002)


def _cfg(**kw):
    base = dict(example="mlp", devices="A100:1,T4:1", global_batch=8, steps=7,
                split="fixed", fixed_split=(5, 3), dtype="float64", checkpoint_every=3,
                emulation=EMULATION)
    return TrainConfig(**(base | kw))


@pytest.mark.torch
@pytest.mark.slow
def test_killed_rank_fails_clearly_and_rerun_resumes_bit_identically(tmp_path):
    straight = launch(_cfg(), run_dir=tmp_path / "straight", timeout_s=240)
    crashed_dir = tmp_path / "crashed"
    with pytest.raises(TrainingFailedError) as err:
        launch(_cfg(fail_at=FailAt(step=5, rank=1)), run_dir=crashed_dir, timeout_s=240)
    message = str(err.value)
    assert "rank 1 (T4) died" in message and "step 3" in message
    resumed = launch(_cfg(), run_dir=crashed_dir, timeout_s=240)
    assert [r["step"] for r in resumed.log] == list(range(7))
    assert [r["attempt"] for r in resumed.log] == [0] * 7  # a fresh launch, not a restart
    assert model_state_equal(parameters_of(crashed_dir / "checkpoints"),
                             parameters_of(tmp_path / "straight" / "checkpoints"))
    assert [r["loss"] for r in resumed.log] == [r["loss"] for r in straight.log]


@pytest.mark.torch
@pytest.mark.slow
def test_elastic_restart_with_rebalancing_matches_single_process(tmp_path):
    cfg = _cfg(split="planned", fixed_split=None, speeds=(2.0, 1.0),
               fail_at=FailAt(step=4, rank=0), global_batch=12)
    result = launch(cfg, run_dir=tmp_path, max_restarts=1, timeout_s=240)
    assert result.restarts == 1
    assert [r["step"] for r in result.log] == list(range(7))
    assert [r["attempt"] for r in result.log] == [0, 0, 0, 1, 1, 1, 1]
    hetero = parameters_of(tmp_path / "checkpoints")
    reference = reference_training(cfg).state_dict()
    assert max(float((hetero[k] - reference[k]).abs().max()) for k in hetero) < 1e-9
