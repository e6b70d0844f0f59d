"""The live service resizes an elastic job by checkpoint-restart.

A decision that gives a running elastic job another GPU count or global batch stops its run
as a move (SIGTERM, no retry charged) and launches the next run at the new size, with
``WORLD_SIZE``, ``TESSERA_GLOBAL_BATCH`` and ``TESSERA_LOCAL_BATCH`` for it and a ``resized``
event. Decisions are handed to the service directly: no policy resizes jobs yet.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from tessera.live.journal import journal
from tessera.live.resize import SizeChange, out_of_range, resize_count, run_batch, size_change
from tessera.live.service import LiveService
from tessera.live.spec import LiveJob, parse_request, to_live_job
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.sched.core.decide import Decision
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import make_service, wait_for

_T4 = resolve_flavor("T4")
_V100_16GB = resolve_flavor("V100-16GB")

TEAM_A = Principal("a", "team-a")
RECORD = ('echo "$WORLD_SIZE ${TESSERA_GLOBAL_BATCH-unset} ${TESSERA_LOCAL_BATCH-unset}" '
          '> "$TESSERA_CHECKPOINT_DIR/run-$TESSERA_RUN-rank-$RANK"; '
          'if [ "$TESSERA_RUN" -ge 2 ]; then exit 0; fi; exec sleep 60')


def _elastic(ckpt: Path, gpus: str = "{min: 1, max: 4}") -> str:
    return (f"name: e\ncommand: '{RECORD}'\ncheckpoint_dir: {ckpt}\nmodel: cifar10\n"
            f"gpus: {gpus}\nglobal_batch: {{initial: 256, max: 1024}}\nflavors: [v100]\n")


def _job(text: str) -> LiveJob:
    return to_live_job(parse_request(text), "j-1", "q", 0.0)


def _running(svc: LiveService, job_id: str) -> Placement:
    wait_for(lambda: svc.store.get(job_id).state is JobState.RUNNING,  # type: ignore[union-attr]
             what="the job to run")
    return svc.store.allocations(("running",), job_id=job_id)[0].placement


def _give(svc: LiveService, job_id: str, p: Placement) -> None:
    """Hand the service a decision that places ``job_id`` on ``p``."""
    journal(svc, Decision(placements={job_id: p}, started=(job_id,), preempted=(), pending={}),
            svc.clock())
    svc.poke()


def _ranks(ckpt: Path, run: int) -> list[tuple[int, str, str]]:
    out = []
    for f in sorted(ckpt.glob(f"run-{run}-rank-*")):
        world, batch, local = f.read_text().split()
        out.append((int(world), batch, local))
    return out


def test_a_running_elastic_job_is_resized_by_checkpoint_restart(service: LiveService,
                                                                tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    jid = service.submit(parse_request(_elastic(ckpt)), TEAM_A).job_id
    first = _running(service, jid)
    assert first.num_gpus == 1
    wait_for(lambda: (ckpt / "run-1-rank-0").exists(), what="run 1 to start its command")
    node = first.gpus_by_node[0][0]
    _give(service, jid, Placement.of(first.flavor, ((node, 4),), global_batch_samples=512))
    wait_for(lambda: service.store.get(jid).state is JobState.SUCCEEDED,  # type: ignore[union-attr]
             what="the resized run to finish")
    assert _ranks(ckpt, 1) == [(1, "256", "256")]
    assert _ranks(ckpt, 2) == [(4, "512", "128")] * 4
    rec = service.store.get(jid)
    assert rec is not None and rec.attempts == 0 and rec.runs == 2  # no retry charged
    events = service.store.events(jid)
    resized = [e.detail for e in events if e.kind == "resized"]
    assert resized == [f"run 2: 1 → 4 GPUs, global batch 256 → 512 on 4×V100-16GB: 4 GPUs "
                       f"on node {node}"]
    assert resize_count(e.kind for e in events) == 1
    assert any(e.kind == "stop-requested" and "run 1: resizing (1 → 4 GPUs" in e.detail
               for e in events)
    assert any(e.kind == "local-batches" and "run 2: local batches 128+128+128+128" in e.detail
               for e in events)
    second = service.store.allocation(jid, 2)
    assert second is not None and second.placement.global_batch_samples == 512


def test_a_plain_move_is_not_a_resize_and_a_rigid_job_keeps_its_size(service: LiveService,
                                                                     tmp_path: Path) -> None:
    rigid = service.submit(parse_request(
        f"name: r\ncommand: exec sleep 60\ngpus: 2\nflavors: [v100]\n"
        f"checkpoint_dir: {tmp_path / 'r'}\n"), TEAM_A).job_id
    p = _running(service, rigid)
    _give(service, rigid, Placement.of(p.flavor, ((p.gpus_by_node[0][0], 4),)))
    refused = [e.detail for e in service.store.events(rigid) if e.kind == "placement-refused"]
    assert refused == ["a rigid job of 2 GPU(s) cannot run on 4"]
    assert service.store.allocations(("running",), job_id=rigid)[0].placement == p
    service.cancel(rigid, TEAM_A)


def test_size_changes_are_recognised() -> None:
    job = _job(_elastic(Path("/c")))
    one = Placement.of(_V100_16GB, (("n0", 1),))
    assert size_change(job, one, Placement.of(_V100_16GB, (("n1", 1),))) is None  # a move
    assert size_change(job, one, Placement.of(_V100_16GB, (("n0", 1),), global_batch_samples=256)
                       ) is None  # the job's own batch, named
    batch_only = size_change(job, one, replace_batch(one, 1024))
    assert batch_only == SizeChange(1, 1, 256, 1024)
    assert batch_only.describe() == "1 → 1 GPUs, global batch 256 → 1024"
    rigid = _job("name: r\ncommand: x\ngpus: 1\nglobal_batch: 256\n")
    assert size_change(rigid, one, replace_batch(one, 1024)) is None
    assert run_batch(rigid, replace_batch(one, 1024)) == 256  # a rigid job keeps its batch
    four = Placement.of(_V100_16GB, (("n0", 4),), global_batch_samples=2)
    assert run_batch(job, four) == 4  # every rank gets a sample


@pytest.mark.parametrize(("p", "message"), [
    (Placement.of(_V100_16GB, (("n0", 8),)), "8 GPUs is outside the job's elastic range 1-4"),
    (Placement.of(_V100_16GB, (("n0", 2),), global_batch_samples=2048),
     "global batch 2048 is outside the job's range 256-1024"),
])
def test_placements_outside_the_range_are_named(p: Placement, message: str) -> None:
    assert out_of_range(_job(_elastic(Path("/c"))), p) == message


def test_the_run_batch_is_stored_with_the_allocation(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as db:  # a state file from before elastic jobs
        db.execute("CREATE TABLE allocations (job_id TEXT NOT NULL, run INTEGER NOT NULL, "
                   "flavor TEXT NOT NULL, gpus_json TEXT NOT NULL, status TEXT NOT NULL, "
                   "stop_reason TEXT, created_s REAL NOT NULL, started_s REAL, ended_s REAL, "
                   "exit_code INTEGER, detail TEXT NOT NULL DEFAULT '', "
                   "PRIMARY KEY (job_id, run))")
        db.execute("INSERT INTO allocations (job_id, run, flavor, gpus_json, status, created_s)"
                   " VALUES ('j-0', 1, 'T4', '[[\"n0\", 1]]', 'planned', 0)")
    store = Store(old)
    a0 = store.allocation("j-0", 1)
    assert a0 is not None and a0.placement.global_batch_samples is None
    p = Placement.of(_T4, (("n0", 2),), global_batch_samples=512)
    with store.tx() as db:
        store.add_allocation(db, "j-1", 1, p, 1.0)
    a1 = store.allocation("j-1", 1)
    assert a1 is not None and a1.placement == p and a1.placement.global_batch_samples == 512
    store.close()


def replace_batch(p: Placement, batch: int) -> Placement:
    return Placement(p.flavors, p.gpus_by_node, p.node_flavors, batch)


SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.torch
@pytest.mark.slow
def test_a_tessera_train_job_resumes_across_a_resize(tmp_path: Path) -> None:
    """A real ``tessera.train`` job (gloo, float64) grown from 1 GPU at batch 128 to 2 GPUs at
    256 and shrunk back: each run checkpoints on SIGTERM (both ranks of the 2-GPU run stop
    after the same step), resumes at the new size, and the job ends with the parameters of
    single-process training on the same samples with the linearly scaled rate.

    The grace period is long: on a loaded machine a rank may take seconds to reach the end of
    its step and exit, and a kill would test the periodic checkpoint instead."""
    service = make_service(tmp_path / "state", grace_s=60.0)
    try:
        _train_across_a_resize(service, tmp_path)
    finally:
        service.stop()


def _train_across_a_resize(service: LiveService, tmp_path: Path) -> None:
    import json
    import sys

    from tessera.train.checkpoint import load_checkpoint, parameters_of
    from tessera.train.config import TrainConfig
    from tessera.train.emulation import EmulationConfig
    from tessera.train.worker import RESULT_NAME, STOPPED_EXIT_CODE, reference_training

    steps = 80
    cfg = TrainConfig("mlp", "V100:1", global_batch=128, steps=steps, split="equal",
                      dtype="float64", checkpoint_every=5,
                      emulation=EmulationConfig(overhead_s=0.1, per_sample_s=1e-6))
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    ckpt, run_dir = tmp_path / "ckpt", tmp_path / "run"
    request = (
        f"name: t\nmodel: cifar10\nflavors: [v100]\ncheckpoint_dir: {ckpt}\n"
        f"gpus: {{min: 1, max: 2}}\nglobal_batch: {{initial: 128, max: 512}}\n"
        f"env: {{PYTHONPATH: {SRC}}}\n"
        f"command: [{sys.executable}, -m, tessera.train.worker, --config, "
        f"{tmp_path / 'cfg.json'}, --run-dir, {run_dir}]\n")
    jid = service.submit(parse_request(request), TEAM_A).job_id

    def trained_at(world_size: int) -> bool:
        """A checkpoint holds a step at this world size (the run has made progress)."""
        state = load_checkpoint(ckpt)
        return state is not None and state.world_size == world_size

    def done() -> bool:
        rec = service.store.get(jid)
        assert rec is not None
        if rec.final and rec.state is not JobState.SUCCEEDED:
            raise AssertionError(f"{rec.state}: {rec.reason}")
        return rec.state is JobState.SUCCEEDED

    node = _running(service, jid).gpus_by_node[0][0]
    wait_for(lambda: trained_at(1), timeout_s=120, what="a checkpoint on 1 rank")
    _give(service, jid, Placement.of(_V100_16GB, ((node, 2),), global_batch_samples=256))
    wait_for(lambda: trained_at(2), timeout_s=200, what="a checkpoint on 2 ranks")
    _give(service, jid, Placement.of(_V100_16GB, ((node, 1),), global_batch_samples=128))
    wait_for(done, timeout_s=400, what="the resized training job to finish")

    result = json.loads((run_dir / RESULT_NAME).read_text())
    log = result["log"]
    assert [r["step"] for r in log] == list(range(steps))
    resizes = [r["resize"] for r in log if r.get("resize")]
    assert len(resizes) == 2
    k1, k2 = resizes[0]["step"], resizes[1]["step"]
    assert 0 < k1 < k2 < steps
    assert resizes[0] | {"lr": 0} == {
        "step": k1, "samples_consumed": 128 * k1, "old_world_size": 1, "new_world_size": 2,
        "old_global_batch": 128, "new_global_batch": 256, "lr": 0}
    assert resizes[1] | {"lr": 0} == {
        "step": k2, "samples_consumed": 128 * k1 + 256 * (k2 - k1), "old_world_size": 2,
        "new_world_size": 1, "old_global_batch": 256, "new_global_batch": 128, "lr": 0}
    assert [len(r["split"]) for r in log] == [1] * k1 + [2] * (k2 - k1) + [1] * (steps - k2)
    assert [r["lr"] for r in log] == pytest.approx(
        [0.05] * k1 + [0.1] * (k2 - k1) + [0.05] * (steps - k2))
    assert log[-1]["loss"] < log[0]["loss"]
    rec = service.store.get(jid)
    assert rec is not None and rec.attempts == 0 and rec.runs == 3
    for run in (1, 2):  # both stops checkpointed on SIGTERM, the 2-rank one on both ranks
        stopped = service.store.allocation(jid, run)
        assert stopped is not None and stopped.exit_code == STOPPED_EXIT_CODE, stopped
    params = parameters_of(ckpt)
    phases = ((k1, 128), (k2 - k1, 256), (steps - k2, 128))
    reference = reference_training(cfg, phases=phases).state_dict()
    assert max(float((params[n] - reference[n]).abs().max()) for n in params) < 1e-9


def test_the_sia_policy_grows_an_elastic_job_in_the_live_service(tmp_path: Path) -> None:
    """The policy that is simulated is the policy that runs: ``sia`` sizes a live elastic job
    round after round (its exploration cap doubles the GPUs each time), and every new size
    is a checkpoint-restart with the batch re-planned per rank."""
    from tessera.sched.core.settings import SchedulerSettings

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    ckpt = tmp_path / "ckpt"
    # (restore_s 0: a resumed run progresses from its launch, so sia does not keep it pinned
    # for the default 30 s restore (live/view.py) and the test needs no minute per resize)
    svc = make_service(state, cluster="v100:8", policy="sia", gpus_per_server=8,
                       settings=SchedulerSettings(round_s=1.0, restore_s=0.0))
    try:
        text = _elastic(ckpt, "{min: 1, max: 8}").replace(RECORD, "exec sleep 60")
        jid = svc.submit(parse_request(text), TEAM_A).job_id
        wait_for(lambda: resize_count(e.kind for e in svc.store.events(jid)) >= 2,
                 what="sia to resize the job twice", timeout_s=60)
        steps = [tuple(map(int, re.findall(r"(\d+) → (\d+) GPUs", e.detail)[0]))
                 for e in svc.store.events(jid) if e.kind == "resized"]
        assert steps[0][0] == 1 and all(new == 2 * old for old, new in steps)
        rec = svc.store.get(jid)
        assert rec is not None and rec.attempts == 0  # resizes charge no retry
    finally:
        svc.stop()

