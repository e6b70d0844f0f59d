"""Resuming a run at another world size and global batch (``tessera.train.resize``).

The key property (issue 15): train k steps at W₁ ranks, checkpoint, resume at W₂ for m steps;
the parameters equal those of a run that had W₂ ranks from the start with the same batch
schedule, and of single-process training on the same samples, up to float summation order.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessera.errors import SpecError  # noqa: E402
from tessera.train.balancer import OnlineBalancer  # noqa: E402
from tessera.train.checkpoint import (  # noqa: E402
    TrainState,
    load_checkpoint,
    parameters_of,
    save_checkpoint,
)
from tessera.train.config import TrainConfig  # noqa: E402
from tessera.train.emulation import EmulationConfig  # noqa: E402
from tessera.train.examples import get_example, global_batch, sample_range  # noqa: E402
from tessera.train.launcher import launch  # noqa: E402
from tessera.train.resize import fit_to_launch, resume_balancer  # noqa: E402
from tessera.train.worker import reference_training  # noqa: E402

EMULATION = EmulationConfig(overhead_s=0.0, per_sample_s=0.0002)
TOL = 1e-9


def _cfg(**kw):
    base = dict(example="mlp", devices="A100:1,T4:1", global_batch=12, steps=3, split="equal",
                dtype="float64", checkpoint_every=3, emulation=EMULATION)
    return TrainConfig(**(base | kw))


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


# -- the sample stream -------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("example", ["mlp", "cnn", "transformer"])
def test_sample_stream_does_not_depend_on_how_it_is_cut(example):
    ex = get_example(example)
    whole_x, whole_y = sample_range(ex, 3, 50, 100, torch.float64)
    parts = [sample_range(ex, 3, a, n, torch.float64) for a, n in ((50, 37), (87, 1), (88, 62))]
    assert torch.equal(torch.cat([p[0] for p in parts]), whole_x)
    assert torch.equal(torch.cat([p[1] for p in parts]), whole_y)
    x, y = global_batch(ex, 3, 2, 40, torch.float64)  # step 2 at 40 per step: samples 80..119
    assert torch.equal(x, whole_x[30:70]) and torch.equal(y, whole_y[30:70])


@pytest.mark.torch
def test_negative_sample_range_is_refused():
    with pytest.raises(ValueError, match="non-negative"):
        sample_range(get_example("mlp"), 0, -1, 4, torch.float64)


# -- learning-rate scaling and configuration ---------------------------------------------------


def test_linear_scaling_follows_the_batch_from_lr_batch():
    cfg = _cfg(global_batch=36, lr_batch=12, lr=0.05)
    assert cfg.scaled_lr() == pytest.approx(0.15)
    assert cfg.lr_at(6) == pytest.approx(0.025)
    assert _cfg(global_batch=36, lr_batch=12, lr_scaling="none").scaled_lr() == 0.05
    assert _cfg().scaled_lr() == 0.05  # lr_batch defaults to the global batch


@pytest.mark.parametrize(("changes", "message"), [
    ({"lr_scaling": "adascale"}, "lr_scaling must be one of linear, none"),
    ({"lr_batch": 0}, "lr_batch must be ≥ 1"),
])
def test_bad_scaling_options_are_clear_errors(changes, message):
    with pytest.raises(SpecError, match=message):
        _cfg(**changes)


# -- fitting the configuration to a service launch ---------------------------------------------


@pytest.mark.torch
def test_a_launch_at_another_size_takes_its_devices_and_batch_from_the_environment(monkeypatch):
    monkeypatch.setenv("TESSERA_GLOBAL_BATCH", "24")
    monkeypatch.setenv("TESSERA_LOCAL_BATCH", "24")
    monkeypatch.setenv("TESSERA_FLAVOR", "V100")
    cfg = _cfg(split="fixed", fixed_split=(7, 5), speeds=(2.0, 1.0))
    fitted, split = fit_to_launch(cfg, world_size=1)
    assert fitted.devices == "V100:1" and fitted.world_size == 1
    assert fitted.global_batch == 24 and fitted.lr_batch == 12
    assert fitted.scaled_lr() == pytest.approx(2 * cfg.lr)
    assert split == (24,) and fitted.fixed_split == (24,) and fitted.speeds is None


@pytest.mark.torch
def test_a_launch_at_the_configured_size_changes_nothing(monkeypatch):
    for var in ("TESSERA_GLOBAL_BATCH", "TESSERA_LOCAL_BATCH", "TESSERA_FLAVOR"):
        monkeypatch.delenv(var, raising=False)
    cfg = _cfg(devices="A100:1")
    assert fit_to_launch(cfg, world_size=1) == (cfg, None)


@pytest.mark.torch
@pytest.mark.parametrize(("env", "message"), [
    ({}, "WORLD_SIZE=1 but the configuration lists 2 device.*TESSERA_FLAVOR"),
    ({"TESSERA_FLAVOR": "T4", "TESSERA_GLOBAL_BATCH": "many"}, "is not an integer"),
    ({"TESSERA_FLAVOR": "T4", "TESSERA_GLOBAL_BATCH": "20", "TESSERA_LOCAL_BATCH": "19"},
     "sums to 19, not the global batch 20"),
])
def test_launch_environment_errors_are_clear(monkeypatch, env, message):
    for var in ("TESSERA_GLOBAL_BATCH", "TESSERA_LOCAL_BATCH", "TESSERA_FLAVOR"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SpecError, match=message):
        fit_to_launch(_cfg(), world_size=1)


# -- which balancer a resumed run keeps --------------------------------------------------------


@pytest.mark.torch
def test_an_exact_resume_keeps_the_balancer_and_a_resize_replans(tmp_path):
    old = OnlineBalancer(12, (8, 4))
    old.observe(1, (0.1, 0.1))
    save_checkpoint(tmp_path, TrainState(3, {}, {}, old.state_dict(), 1.0, [], 36, 2, 12))
    state = load_checkpoint(tmp_path)
    assert state is not None and state.samples_consumed == 36
    fresh = OnlineBalancer(12, (6, 6))
    kept, resize = resume_balancer(state, _cfg(), 2, fresh)
    assert resize is None and kept.split == (8, 4)
    grown = _cfg(devices="A100:1,T4:2", global_batch=18, lr_batch=12)
    fresh3 = OnlineBalancer(18, (6, 6, 6))
    kept, resize = resume_balancer(state, grown, 3, fresh3)
    assert kept is fresh3
    assert resize is not None and resize.to_json() == {
        "step": 3, "samples_consumed": 36, "old_world_size": 2, "new_world_size": 3,
        "old_global_batch": 12, "new_global_batch": 18, "lr": pytest.approx(0.075)}
    assert "2 → 3 ranks, global batch 12 → 18" in resize.describe()


# -- the key test: real gloo processes ---------------------------------------------------------


@pytest.mark.torch
@pytest.mark.slow
def test_resume_at_new_world_size_and_batch_equals_a_run_that_had_it_from_the_start(tmp_path):
    """2 ranks at B=12 for 3 steps, then 3 ranks at B=18 for 3 more, against 3 ranks from the
    start (B=12 then 18) and single-process training on the same samples."""
    k_steps, batch1, batch2 = 3, 12, 18
    small = _cfg(split="fixed", fixed_split=(7, 5), steps=k_steps)
    grown = _cfg(devices="A100:1,T4:2", global_batch=batch2, lr_batch=batch1, steps=6,
                 split="planned", speeds=(2.0, 1.0, 1.0))
    launch(small, run_dir=tmp_path / "resized", timeout_s=240)
    resized = launch(grown, run_dir=tmp_path / "resized", timeout_s=240)

    three_small = grown.with_changes(global_batch=batch1, lr_batch=None, steps=k_steps)
    launch(three_small, run_dir=tmp_path / "three", timeout_s=240)
    launch(grown, run_dir=tmp_path / "three", timeout_s=240)

    assert [r["step"] for r in resized.log] == list(range(6))
    assert [r["global_batch"] for r in resized.log] == [batch1] * 3 + [batch2] * 3
    assert [r["lr"] for r in resized.log] == pytest.approx([0.05] * 3 + [0.075] * 3)
    assert len(resized.resizes) == 1
    assert resized.resizes[0] | {"lr": 0} == {
        "step": 3, "samples_consumed": 3 * batch1, "old_world_size": 2, "new_world_size": 3,
        "old_global_batch": batch1, "new_global_batch": batch2, "lr": 0}
    assert sum(resized.log[3]["split"]) == batch2 and len(resized.log[3]["split"]) == 3

    params = parameters_of(tmp_path / "resized" / "checkpoints")
    from_start = parameters_of(tmp_path / "three" / "checkpoints")
    reference = reference_training(grown, phases=((k_steps, batch1), (3, batch2))).state_dict()
    assert _max_diff(params, from_start) < TOL
    assert _max_diff(params, reference) < TOL
    # Not a vacuous match: the old batch (or an unscaled rate) gives other parameters.
    unscaled = reference_training(grown.with_changes(lr_scaling="none"),
                                  phases=((k_steps, batch1), (3, batch2))).state_dict()
    assert _max_diff(params, unscaled) > 1e-4
    assert resized.log[-1]["loss"] < resized.log[0]["loss"]


@pytest.mark.torch
@pytest.mark.slow
def test_shrinking_to_one_rank_at_the_same_batch_continues_exactly(tmp_path):
    wide = _cfg(devices="A100:1,T4:2", split="planned", speeds=(2.0, 1.0, 1.0), steps=4,
                checkpoint_every=2)
    launch(wide, run_dir=tmp_path, timeout_s=240)
    narrow = _cfg(devices="A100:1", steps=7)
    result = launch(narrow, run_dir=tmp_path, timeout_s=240)
    assert [r["split"] for r in result.log[4:]] == [[12]] * 3
    assert result.resizes[0]["old_world_size"] == 3 and result.resizes[0]["new_world_size"] == 1
    assert result.final_split == (12,)
    params = parameters_of(tmp_path / "checkpoints")
    assert _max_diff(params, reference_training(narrow).state_dict()) < TOL


# -- stopping on request (the service's SIGTERM) -----------------------------------------------


@pytest.mark.torch
def test_a_stop_request_ends_the_run_after_the_step_with_a_checkpoint(tmp_path):
    import signal

    from tessera.train.worker import StopRequested, StopSignal, train_loop

    stop = StopSignal()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop.install()
        signal.raise_signal(signal.SIGTERM)  # handled: a flag, not a kill
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stop.requested
    cfg = _cfg(devices="A100:1", steps=5, checkpoint_dir=str(tmp_path / "ckpt"))
    with pytest.raises(StopRequested) as err:
        train_loop(cfg, 0, 1, tmp_path, stop=stop)
    assert err.value.next_step == 1
    state = load_checkpoint(tmp_path / "ckpt")
    assert state is not None and state.next_step == 1 and state.samples_consumed == 12
    assert not (tmp_path / "result.json").exists()
    train_loop(cfg, 0, 1, tmp_path)  # the next run resumes and finishes
    final = load_checkpoint(tmp_path / "ckpt")
    assert final is not None and final.next_step == 5 and final.samples_consumed == 60
    assert _max_diff(final.model, reference_training(cfg).state_dict()) < TOL
