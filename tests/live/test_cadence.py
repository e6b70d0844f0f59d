"""The live service decides on the simulator's cadence, from the same settings.

These tests drive the loop's cadence step by step with a chosen clock (no loop thread, no
runs launched), and read the allocations the rounds journal.
"""

from __future__ import annotations

import time
from pathlib import Path

from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.sched.core.settings import SchedulerSettings
from tests.live.helpers import make_service

ADMIN = Principal("admin", None)


def _service(tmp_path: Path, policy: str, **settings: object) -> LiveService:
    return make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, policy=policy,
                        settings=SchedulerSettings.model_validate(settings), start=False)


def _submit(svc: LiveService, name: str, gpus: int) -> str:
    req = parse_request(f"name: {name}\nqueue: team-a\ngpus: {gpus}\ncommand: sleep 600")
    return svc.submit(req, ADMIN).job_id


def _planned(svc: LiveService) -> set[str]:
    return {a.job_id for a in svc.store.allocations(("planned",))}


def test_round_based_policy_decides_every_round_s(tmp_path: Path) -> None:
    svc = _service(tmp_path, "max_min_fairness", round_s=100.0)
    assert svc.uses_rounds
    a = _submit(svc, "a", 1)
    acted, nxt = svc._round_cadence(1000.0, True, None)  # idle until now: a round at once
    assert acted and nxt == 1100.0 and _planned(svc) == {a}
    b = _submit(svc, "b", 1)  # a change between rounds leaves the free GPU idle ...
    acted, nxt = svc._round_cadence(1050.0, True, nxt)
    assert not acted and nxt == 1100.0 and _planned(svc) == {a}
    acted, nxt = svc._round_cadence(1100.0, False, nxt)  # ... until the next round
    assert acted and nxt == 1200.0 and _planned(svc) == {a, b}


def test_fill_between_rounds_places_waiting_jobs_at_once(tmp_path: Path) -> None:
    svc = _service(tmp_path, "max_min_fairness", round_s=100.0, fill_between_rounds=True)
    a = _submit(svc, "a", 1)
    _acted, nxt = svc._round_cadence(1000.0, True, None)
    state = svc.policy_state
    b = _submit(svc, "b", 1)
    acted, nxt2 = svc._round_cadence(1050.0, True, nxt)
    assert acted and nxt2 == nxt and _planned(svc) == {a, b}
    assert svc.policy_state is state  # a fill step leaves the policy's memory alone


def test_rounds_stop_when_idle_and_snapshots_carry_the_round_length(tmp_path: Path) -> None:
    svc = _service(tmp_path, "hetero_srpt", mode="rounds", round_s=60.0)
    assert svc.uses_rounds
    acted, nxt = svc._round_cadence(10.0, True, None)
    assert acted and nxt is None and svc.idle  # nothing to decide: no round is scheduled
    seen: list[float | None] = []
    decide = svc.policy.rank

    def spy(ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.snapshot.round_s)
        return decide(ctx)

    svc.policy.rank = spy  # type: ignore[method-assign]
    _submit(svc, "a", 1)
    acted, nxt = svc._round_cadence(20.0, True, None)
    assert acted and nxt == 80.0 and seen and set(seen) == {60.0}


def test_event_driven_policy_keeps_event_cadence(tmp_path: Path) -> None:
    svc = _service(tmp_path, "fifo")
    assert not svc.uses_rounds
    svc2 = _service(tmp_path / "two", "fifo", mode="rounds")
    assert svc2.uses_rounds


def test_a_full_cluster_takes_submissions_without_rounds_until_gpus_free(tmp_path: Path) -> None:
    """fifo (not preemptive) on a full cluster: submissions wake the loop but start no round;
    the run's exit frees its GPU and the next job starts at once."""
    from tessera.live.executors.local import LocalExecutor
    from tessera.live.options import ServiceOptions
    from tessera.live.store import Store
    from tessera.live.tenancy import load_tenancy
    from tessera.model.cluster import load_cluster
    from tests.live.helpers import wait_for, write_config

    state = tmp_path / "state"
    write_config(state)
    svc = LiveService(Store(state / "state.db"), LocalExecutor(tmp_path / "work" / "runs", 1.0),
                      load_cluster("v100:1", 1), load_tenancy(state), "fifo", tmp_path / "work",
                      ServiceOptions(period_s=3600.0, poll_s=0.05, grace_s=1.0))
    svc.start()
    try:
        first = _submit(svc, "first", 1)
        wait_for(lambda: svc.store.get(first).state.value == "running",  # type: ignore[union-attr]
                 what="the first job to run")
        assert not svc.could_start_anything()
        rounds = svc.rounds
        waiting = [_submit(svc, f"w{i}", 1) for i in range(5)]
        wait_for(lambda: len(svc.store.jobs(active_only=True)) == 6, what="the submissions")
        time.sleep(0.5)  # ten loop iterations, each woken by a submission
        assert svc.rounds == rounds
        svc.cancel(first, ADMIN)
        wait_for(lambda: svc.store.get(waiting[0]).state.value in ("admitted", "running"),  # type: ignore[union-attr]
                 what="the next job to start once the GPU is free")
        assert svc.rounds > rounds
    finally:
        svc.stop()


def test_a_preemptive_policy_always_decides(tmp_path: Path) -> None:
    svc = _service(tmp_path, "las")
    assert svc.policy.preemptive and svc.could_start_anything()


def test_rounds_without_progress_record_an_event_and_a_metric(tmp_path: Path) -> None:
    """The live side of the no-progress net (:class:`tessera.sched.core.cadence.ProgressWatch`):
    rounds in which jobs are active but none runs past its restore (here: planned runs that
    are never launched) end in one ``no-progress`` event naming the round and the swap's
    cost, counted in ``stalls`` and shown by ``/healthz``."""
    svc = _service(tmp_path, "max_min_fairness", round_s=60.0, checkpoint_s=30.0,
                   restore_s=30.0)
    _submit(svc, "a", 1)
    nxt: float | None = None
    t = 1000.0
    for _ in range(12):
        _acted, nxt = svc._round_cadence(t, True, nxt)
        assert nxt is not None
        t = nxt
    stalls = [e for e in svc.store.events() if e.kind == "no-progress"]
    assert svc.stalls == 1 and len(stalls) == 1 and svc.stalled_rounds >= 10
    assert "round_s 60 s is not longer than checkpoint + restore (60 s)" in stalls[0].detail
    from fastapi.testclient import TestClient

    from tessera.live.api import create_app

    health = TestClient(create_app(svc)).get("/healthz").json()
    assert health["stalls"] == 1 and health["stalled_rounds"] == svc.stalled_rounds
