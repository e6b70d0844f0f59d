"""Live step-time fits end to end (issue 35 part 5): a real elastic job on the local executor
reports its local batch at one GPU, is resized to two, reports there too, and the service
fits its throughput model, says so in its events, and lays the fit on the next decision's
view."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

import tessera
from tessera.live import service as service_mod
from tessera.live.journal import journal
from tessera.live.spec import validate_request
from tessera.live.tenancy import Principal
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.sched.core.decide import Decision
from tessera.sched.core.snapshot import Placement, Snapshot
from tests.live.helpers import ServerThread, make_service, wait_for

ADMIN = Principal("admin", None)
SRC = str(Path(tessera.__file__).parents[1])
V100 = resolve_flavor("V100-16GB")
#: Rank 0 reports steps at 10 steps/s on one GPU and 8 on two, with its local batch (the same
#: 128 samples per GPU: two GPUs add a synchronisation to each step, as Pollux's model has it --
#: a step that got *faster* at the same local batch is one no fit of that model can follow);
#: every rank lives until stopped.
SCRIPT = """
import os, time
import tessera
world = int(os.environ["WORLD_SIZE"])
rate = 10.0 if world == 1 else 8.0
local = float(os.environ["TESSERA_LOCAL_BATCH"])
t0 = time.monotonic()
while True:
    if os.environ["RANK"] == "0":
        tessera.progress(steps=rate * (time.monotonic() - t0), local_batch=local)
    time.sleep(0.1)
"""


@pytest.mark.slow
def test_a_job_resized_to_two_gpus_gets_a_fitted_model_in_the_next_decision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, start=False)
    srv = ServerThread(svc)
    svc.opts = replace(svc.opts, progress_url=srv.url)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    seen: list[Snapshot] = []
    real = service_mod.build_snapshot

    def spy(*args: object, **kw: object) -> Snapshot:
        snap = real(*args, **kw)  # type: ignore[arg-type]
        seen.append(snap)
        return snap

    monkeypatch.setattr(service_mod, "build_snapshot", spy)
    svc.start()
    try:
        req = validate_request({
            "name": "fit", "queue": "team-a", "model": "cifar10", "flavors": ["v100"],
            "gpus": {"min": 1, "max": 2}, "global_batch": {"initial": 128, "max": 512},
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "command": [sys.executable, str(script)], "env": {"PYTHONPATH": SRC}})
        jid = svc.submit(req, ADMIN).job_id
        wait_for(lambda: svc.progress.steps.sizes(jid) == {V100: {(1, 128.0)}}, 30,
                 "a step time on one GPU")
        a = svc.store.allocation(jid, 1)
        assert a is not None and a.placement.num_gpus == 1
        node = a.placement.gpus_by_node[0][0]
        two = Placement.of(V100, ((node, 2),), global_batch_samples=256)
        journal(svc, Decision(placements={jid: two}, started=(jid,), preempted=(), pending={}),
                svc.clock())
        svc.poke()
        said = f"step times fitted on {V100.short} from 2 sizes"

        def events() -> list[str]:
            return [e.detail for e in svc.store.events(jid)]

        wait_for(lambda: any(d.startswith(said) for d in events()), 40, "the fit event")
        rounds = svc.rounds
        svc.poke()
        wait_for(lambda: svc.rounds > rounds, 10, "the next round")
        view = next(v for v in seen[-1].jobs if v.spec.job_id == jid)
        [(flavor, fit)] = view.step_fits
        assert flavor == V100
        # 0.1 s per step at 1 x 128, 0.125 s at 2 x 128. The rates are timed on the service's
        # clock, when each report arrives, so a busy machine delays some: a band of 30 %.
        one, two_s = fit.iteration_s(1, 128.0), fit.iteration_s(2, 128.0)
        assert one == pytest.approx(0.1, rel=0.3) and two_s == pytest.approx(0.125, rel=0.3)
        assert svc.store.get(jid).state is JobState.RUNNING  # type: ignore[union-attr]
    finally:
        svc.stop()
        srv.stop()
