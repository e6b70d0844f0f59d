"""Live step-time fits (issue 35 part 5, Pollux's agent): a report's ``local_batch`` with the
run's gang size gives step times, the service fits the job's throughput model from two sizes,
keeps it in the store, and the next decision's view carries it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tessera.live import lifecycle
from tessera.live import service as service_mod
from tessera.live.progress import ProgressBook
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.step_fits import MAX_LOCAL_BATCH, MIN_FIT_POINTS
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tessera.model.jobs import JobState
from tessera.sched.core.snapshot import Placement, Snapshot
from tests.live.helpers import make_service
from tests.live.test_progress import RUNS, V100

ADMIN = Principal("admin", None)
GPUS = {("j-1", 1): 1, ("j-1", 3): 4}


def _book(store: Store) -> ProgressBook:
    runs = dict(RUNS) | {("j-1", 3): ("running", V100, ("n0",))}
    return ProgressBook(store, lambda j, r: runs.get((j, r)), lambda _j, _f: 2.0,
                        lambda j, r: GPUS[(j, r)])


def _report_at(book: ProgressBook, run: int, step_s: float, local: float, t0: float,
               start: float = 0.0) -> None:
    """Four reports of run ``run`` 2 s apart (service clock ``t0`` on), from ``start`` steps
    at ``step_s`` s per step."""
    tok = book.token("j-1", run)
    for k in range(4):
        out = book.report("j-1", run, tok, {"steps": start + k * 2.0 / step_s,
                                            "local_batch": local}, t0 + 2.0 * k)
        assert out.status == 200, out.detail


def test_step_times_from_two_gang_sizes_make_a_fit_that_a_restart_keeps(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    book = _book(store)
    _report_at(book, 1, 0.2, 64.0, 100.0)  # run 1: 1 GPU, 0.2 s/step
    assert book.steps.refit("j-1") == [] and book.steps.fits("j-1") == ()  # one size only
    _report_at(book, 3, 0.3, 64.0, 200.0)  # run 3: 4 GPUs, 0.3 s/step (sync)
    events = book.steps.refit("j-1")
    assert len(events) == 1 and f"step times fitted on {V100.short} from 2 sizes" in events[0]
    [(flavor, fit)] = book.steps.fits("j-1")
    assert flavor == V100
    assert fit.iteration_s(1, 64.0) == pytest.approx(0.2, rel=1e-3)
    assert fit.iteration_s(4, 64.0) == pytest.approx(0.3, rel=1e-3)
    assert MIN_FIT_POINTS == 2
    # the same step times again move nothing: no event, same object
    _report_at(book, 3, 0.3, 64.0, 300.0, start=1000.0)
    assert book.steps.refit("j-1") == [] and book.steps.fits("j-1")[0][1] is fit
    # a restart: a new book over the same store has the fit and its version
    again = _book(Store(tmp_path / "state.db"))
    assert again.steps.fits("j-1") == ((V100, fit),)
    assert again.steps.book.version("j-1") == book.steps.book.version("j-1") == 1
    assert again.steps.book.observations("j-1") == book.steps.book.observations("j-1")
    # a slower gang later: the fit moves, with an event
    _report_at(again, 3, 0.45, 64.0, 400.0)
    moved = again.steps.refit("j-1")
    assert len(moved) == 1 and "moved (version 2)" in moved[0] and "4 GPUs x 64" in moved[0]
    assert again.steps.fits("j-1")[0][1].iteration_s(4, 64.0) == pytest.approx(0.45, rel=1e-2)


@pytest.mark.parametrize(("local", "why"), [
    (0, "local_batch must be > 0"), (-8, "local_batch must be > 0"),
    (math.nan, "local_batch must be finite"), (math.inf, "local_batch must be finite"),
    ("64", "local_batch must be a number"), (True, "local_batch must be a number"),
    (MAX_LOCAL_BATCH * 2, "is absurd")])
def test_a_bad_local_batch_is_refused_with_a_reason_and_the_job_unharmed(
        tmp_path: Path, local: object, why: str) -> None:
    book = _book(Store(tmp_path / "state.db"))
    tok = book.token("j-1", 1)
    assert book.report("j-1", 1, tok, {"steps": 1, "local_batch": 32}, 10.0).status == 200
    bad = book.report("j-1", 1, tok, {"steps": 3, "local_batch": local}, 12.0)
    assert bad.status == 422 and why in bad.detail
    assert bad.event is not None and why in bad.event
    # the job goes on reporting; the refused report left no trace in its step times
    assert book.report("j-1", 1, tok, {"steps": 3, "local_batch": 32}, 14.0).status == 200
    assert book.report("j-1", 1, tok, {"steps": 4, "local_batch": 32}, 16.0).status == 200
    book.steps.refit("j-1")  # 2 steps in 4 s, 1 in 2 s: 2 s per step
    assert book.steps.book.observations("j-1") == {V100: {(1, 32.0): pytest.approx(2.0)}}


def test_the_next_decision_sees_the_fit_from_two_gang_sizes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the service and the report route: run 1 on one GPU, run 2 on two report their
    local batch; the round after the second size lays the fitted model on the job's view,
    and the job's events say it was fitted."""
    from fastapi.testclient import TestClient

    from tessera.live.api import create_app

    svc: LiveService = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2,
                                    policy="pollux", start=False)
    text = ("name: j\nqueue: team-a\ncommand: 'true'\nflavors: [V100]\nmodel: cifar10\n"
            "gpus: {min: 1, max: 2}\nglobal_batch: {initial: 256, max: 1024}\n")
    jid = svc.submit(parse_request(text), ADMIN).job_id
    node = svc.cluster.nodes[0]
    seen: list[Snapshot] = []
    real = service_mod.build_snapshot

    def spy(*args: object, **kw: object) -> Snapshot:
        snap = real(*args, **kw)  # type: ignore[arg-type]
        seen.append(snap)
        return snap

    monkeypatch.setattr(service_mod, "build_snapshot", spy)
    clock = [0.0]
    monkeypatch.setattr(svc, "clock", lambda: clock[0])
    client = TestClient(create_app(svc))

    def run_on(run: int, gpus: int, step_s: float, t0: float) -> None:
        """Run ``run`` on ``gpus`` GPUs (the one the last decision planned, if it did)."""
        with svc.store.tx() as db:
            if run > 1:
                svc.store.set_allocation(db, jid, run - 1, status="done", ended_s=t0)
            if svc.store.allocation(jid, run) is None:
                svc.store.add_allocation(db, jid, run, Placement.of(
                    node.flavor, ((node.node_id, gpus),)), t0)
                svc.store.update_job(db, jid, runs=run)
            if svc.store.get(jid).state is JobState.PENDING:  # type: ignore[union-attr]
                svc.store.transition(db, jid, JobState.ADMITTED, t0, "planned")
            a = svc.store.allocation(jid, run)
            assert a is not None and a.placement.num_gpus == gpus
            lifecycle.mark_running(svc.store, db, a, t0, "launched", svc.speeds)
        tok = svc.progress.token(jid, run)
        for k in range(4):
            clock[0] = t0 + 2.0 * k
            r = client.post(f"/api/progress/{jid}/{run}", json={
                "steps": k * 2.0 / step_s, "local_batch": 256 / gpus},
                headers={"Authorization": f"Bearer {tok}"})
            assert r.status_code == 200, r.text
        clock[0] += 2.0
        bad = client.post(f"/api/progress/{jid}/{run}", json={"steps": 1e9, "local_batch": 0},
                          headers={"Authorization": f"Bearer {tok}"})
        assert bad.status_code == 422 and "local_batch must be > 0" in bad.json()["detail"]

    run_on(1, 1, 0.5, 10.0)
    svc.round(20.0)
    assert seen[-1].jobs[0].step_fits == ()  # one size: not fitted yet
    run_on(2, 2, 0.3, 30.0)
    svc.round(40.0)
    [(flavor, fit)] = seen[-1].jobs[0].step_fits
    assert flavor == node.flavor
    assert fit.iteration_s(1, 256.0) == pytest.approx(0.5, rel=1e-3)
    assert fit.iteration_s(2, 128.0) == pytest.approx(0.3, rel=1e-3)
    texts = [e.detail for e in svc.store.events(jid)]
    assert any(f"step times fitted on {flavor.short} from 2 sizes" in t for t in texts), texts
    assert any("local_batch must be > 0" in t for t in texts)
