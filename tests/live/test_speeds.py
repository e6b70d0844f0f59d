"""Live progress of runs that share GPUs: each run's steps at the speed it ran, alone or at
the measured pair speed, settled when a partner comes or goes (``tessera.live.speeds``).

Driven through the store with explicit times (no loop, no processes), and checked against
hand-computed steps from Gavel's table: LM (batch size 20) runs 64.74 steps/s alone on a V100
and 51.33 beside ResNet-18 (batch size 32), which runs 29.95 steps/s either way.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tessera.live import lifecycle
from tessera.live.executors.base import RunStatus
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tessera.live.view import build_snapshot
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId, JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import make_service

ADMIN = Principal("admin", None)
SHARING = [{"name": "team-a", "nominal_gpus": 4, "borrowing_limit_gpus": 4, "sharing": True},
           {"name": "team-b", "nominal_gpus": 4}]
LM, RESNET = "LM (batch size 20)", "ResNet-18 (batch size 32)"
TABLE = default_throughputs()
LM_ALONE = TABLE.throughput(LM, resolve_flavor("V100"), 1, True)
LM_PAIRED, RESNET_PAIRED = TABLE.colocated(LM, RESNET, resolve_flavor("V100"), 1)[0], \
    TABLE.colocated(RESNET, LM, resolve_flavor("V100"), 1)[0]
GPU = Placement.of(resolve_flavor("V100-16GB"), (("v100-0", 1),))


@pytest.fixture
def svc(tmp_path: Path) -> LiveService:
    return make_service(tmp_path / "state", cluster="v100:1", policy="hetero_pack",
                        queues=SHARING, gpus_per_server=1, start=False)


def _job(svc: LiveService, model: str) -> str:
    text = (f"name: j\nqueue: team-a\ncommand: 'true'\nflavors: [V100]\njob_type: {model}\n"
            "total_steps: 1000000\n")
    return svc.submit(parse_request(text), ADMIN).job_id


def _start(svc: LiveService, jid: str, now_s: float, mate: str = "", run: int = 1) -> None:
    """Start run ``run`` of ``jid``; with ``mate``, on the GPUs of ``mate``'s running run,
    which is relabelled to name ``jid`` (as the decision that pairs them does)."""
    p = GPU if not mate else Placement.of(GPU.flavor, GPU.gpus_by_node,
                                       colocated_with=(JobId(mate),))
    with svc.store.tx() as db:
        for host in svc.store.allocations(("running",), job_id=mate) if mate else ():
            svc.store.set_allocation(db, mate, host.run, colocated_with=jid)
        svc.store.add_allocation(db, jid, run, p, now_s)
        svc.store.transition(db, jid, JobState.ADMITTED, now_s, "planned")
        a = svc.store.allocation(jid, run)
        assert a is not None
        lifecycle.mark_running(svc.store, db, a, now_s, "launched", svc.speeds)


def _end(svc: LiveService, jid: str, now_s: float) -> None:
    with svc.store.tx() as db:
        a = svc.store.allocation(jid, 1)
        assert a is not None
        lifecycle.finish_run(svc.store, db, a, RunStatus("exited", 0), now_s, svc.speeds)


def _done(svc: LiveService, jid: str, now_s: float) -> float:
    """Steps the snapshot at ``now_s`` counts for ``jid`` (total minus remaining)."""
    holding = svc.store.allocations()
    recs = [r for r in svc.store.jobs(active_only=True)]
    snap = build_snapshot(now_s, svc.cluster, recs, holding, {}, svc.oracle, None)
    view = next(v for v in snap.jobs if v.job_id == jid)
    return view.spec.total_steps - view.remaining_steps


def test_a_host_runs_at_its_pair_speed_while_a_partner_shares_its_gpu(svc: LiveService) -> None:
    host, rider = _job(svc, LM), _job(svc, RESNET)
    _start(svc, host, 0.0)
    assert _done(svc, host, 100.0) == pytest.approx(100 * LM_ALONE)
    _start(svc, rider, 100.0, mate=host)
    a = svc.store.allocation(host, 1)
    assert a is not None and a.settled_s == 100.0 and a.steps == pytest.approx(100 * LM_ALONE)
    assert _done(svc, host, 150.0) == pytest.approx(100 * LM_ALONE + 50 * LM_PAIRED)
    assert _done(svc, rider, 150.0) == pytest.approx(50 * RESNET_PAIRED)
    _end(svc, rider, 200.0)
    rec = svc.store.get(rider)
    assert rec is not None and rec.steps_done == pytest.approx(100 * RESNET_PAIRED)
    # The host has its GPU to itself again: alone from 200 s on.
    assert _done(svc, host, 250.0) == pytest.approx(
        100 * LM_ALONE + 100 * LM_PAIRED + 50 * LM_ALONE)
    _end(svc, host, 300.0)
    rec = svc.store.get(host)
    assert rec is not None and rec.steps_done == pytest.approx(
        100 * LM_ALONE + 100 * LM_PAIRED + 100 * LM_ALONE)


def test_both_runs_of_a_pair_ending_together_count_their_shared_time_once(
        svc: LiveService) -> None:
    host, rider = _job(svc, LM), _job(svc, RESNET)
    _start(svc, host, 0.0)
    _start(svc, rider, 10.0, mate=host)
    before = [svc.store.allocation(j, 1) for j in (host, rider)]
    for a in before:  # read together, as the loop reads them, then ended one by one
        assert a is not None
        with svc.store.tx() as db:
            lifecycle.finish_run(svc.store, db, a, RunStatus("exited", 0), 40.0, svc.speeds)
    h, r = svc.store.get(host), svc.store.get(rider)
    assert h is not None and r is not None
    assert h.steps_done == pytest.approx(10 * LM_ALONE + 30 * LM_PAIRED)
    assert r.steps_done == pytest.approx(30 * RESNET_PAIRED)


def test_a_partner_planned_but_not_started_does_not_slow_its_host(svc: LiveService) -> None:
    host, rider = _job(svc, LM), _job(svc, RESNET)
    _start(svc, host, 0.0)
    p = Placement.of(GPU.flavor, GPU.gpus_by_node, colocated_with=(JobId(host),))
    with svc.store.tx() as db:
        svc.store.add_allocation(db, rider, 1, p, 5.0)
    assert _done(svc, host, 60.0) == pytest.approx(60 * LM_ALONE)


def test_a_job_stored_before_runs_kept_steps_counts_its_runs_by_flavor(
        svc: LiveService) -> None:
    jid = _job(svc, LM)
    with svc.store.tx() as db:
        svc.store.update_job(db, jid, steps_done=None, run_s_json='{"V100-16GB": 20.0}')
    assert _done(svc, jid, 0.0) == pytest.approx(20 * LM_ALONE)
    _start(svc, jid, 100.0)
    _end(svc, jid, 110.0)
    rec = svc.store.get(jid)
    assert rec is not None and rec.steps_done == pytest.approx(30 * LM_ALONE)


def test_a_state_file_from_before_gains_the_step_columns(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as db:  # the jobs and allocations tables before runs kept steps
        db.execute(
            "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, queue TEXT NOT "
            "NULL, state TEXT NOT NULL, spec_json TEXT NOT NULL, submit_time_s REAL NOT NULL, "
            "attempts INTEGER NOT NULL DEFAULT 0, runs INTEGER NOT NULL DEFAULT 0, "
            "pending_since_s REAL NOT NULL, last_run_end_s REAL, first_start_s REAL, "
            "finish_s REAL, attained_gpu_s REAL NOT NULL DEFAULT 0, run_s_json TEXT NOT NULL "
            "DEFAULT '{}', reason TEXT NOT NULL DEFAULT '', final INTEGER NOT NULL DEFAULT 0, "
            "exit_code INTEGER)")
        db.execute(
            "CREATE TABLE allocations (job_id TEXT NOT NULL, run INTEGER NOT NULL, flavor TEXT "
            "NOT NULL, gpus_json TEXT NOT NULL, status TEXT NOT NULL, stop_reason TEXT, "
            "created_s REAL NOT NULL, started_s REAL, ended_s REAL, exit_code INTEGER, detail "
            "TEXT NOT NULL DEFAULT '', global_batch_samples INTEGER, colocated_with TEXT NOT "
            "NULL DEFAULT '', PRIMARY KEY (job_id, run))")
        db.execute("INSERT INTO allocations (job_id, run, flavor, gpus_json, status, created_s,"
                   " started_s) VALUES ('j-0', 1, 'T4', '[[\"n0\", 1]]', 'running', 0, 5)")
    store = Store(old)
    a = store.allocation("j-0", 1)
    assert a is not None and a.steps == 0.0 and a.settled_s is None and a.started_s == 5
    cols = {r[1] for r in store._read("PRAGMA table_info(jobs)")}
    assert "steps_done" in cols
    store.close()


def test_a_run_is_not_slowed_by_the_draining_run_of_a_job_that_moves_onto_its_node(
        svc: LiveService) -> None:
    """A job moving onto its new partner's node leaves an old run there, labelled with its old
    partner, that ends after the decision has relabelled the partner's run to name the job.
    GPUs are counted per node, so that old run "holds the same GPUs" as the partner's run: the
    partner must not be settled at the pair speed for the time it ran alone. (Found by
    tests/live/test_replay_parity.py: two jobs finished 22-24 s later live than simulated under
    max_min_fairness_packed.)"""
    mover, stayer, old_mate = _job(svc, RESNET), _job(svc, LM), _job(svc, RESNET)
    _start(svc, mover, 0.0, mate=old_mate)  # paired with a job that has since left
    _start(svc, stayer, 1.0)  # alone on the node's other GPU
    with svc.store.tx() as db:  # the decision at 50 s relabels the stayer, stops the mover ...
        svc.store.set_allocation(db, stayer, 1, colocated_with=mover)
        svc.store.set_allocation(db, mover, 1, status="stopping", stop_reason="preempt")
    old = svc.store.allocation(mover, 1)
    assert old is not None
    with svc.store.tx() as db:  # ... and the mover's old run, stopped, ends
        lifecycle.finish_run(svc.store, db, old, RunStatus("exited", 143, stopped=True), 50.0,
                             svc.speeds)
    assert _done(svc, stayer, 50.0) == pytest.approx(49 * LM_ALONE)
    _start(svc, mover, 50.0, mate=stayer, run=2)  # its new run joins the stayer's GPUs
    assert _done(svc, stayer, 60.0) == pytest.approx(49 * LM_ALONE + 10 * LM_PAIRED)
    assert _done(svc, mover, 60.0) == pytest.approx(
        50 * TABLE.throughput(RESNET, resolve_flavor("V100"), 1, True) + 10 * RESNET_PAIRED)


def test_a_run_whose_partner_left_is_relabelled_and_shown_alone(svc: LiveService) -> None:
    """When a partner's run ends, the run that stays drops it from its label at once, with an
    event; a label naming a job with no run on those GPUs (a partner planned but withdrawn) is
    not shown to the policy either -- the simulator shows such a run alone."""
    host, rider, ghost = _job(svc, LM), _job(svc, RESNET), _job(svc, RESNET)
    _start(svc, host, 0.0)
    _start(svc, rider, 10.0, mate=host)
    _end(svc, host, 40.0)
    stored = svc.store.allocation(rider, 1)
    assert stored is not None and stored.placement.colocated_with == ()
    assert any("to itself again" in e.detail and host in e.detail
               for e in svc.store.events(rider) if e.kind == "sharing")
    with svc.store.tx() as db:
        svc.store.set_allocation(db, rider, 1, colocated_with=ghost)
    snap = build_snapshot(50.0, svc.cluster, svc.store.jobs(active_only=True),
                          svc.store.allocations(), {}, svc.oracle, None)
    view = next(v for v in snap.jobs if v.job_id == rider)
    assert view.placement is not None and view.placement.colocated_with == ()


def _stop(svc: LiveService, jid: str, run: int = 1) -> None:
    with svc.store.tx() as db:
        svc.store.set_allocation(db, jid, run, status="stopping", stop_reason="preempt")


def _end_stopped(svc: LiveService, jid: str, now_s: float, run: int = 1) -> None:
    a = svc.store.allocation(jid, run)
    assert a is not None
    with svc.store.tx() as db:
        lifecycle.finish_run(svc.store, db, a, RunStatus("exited", 143, stopped=True), now_s,
                             svc.speeds)


def test_a_host_runs_alone_while_its_preempted_partner_drains(svc: LiveService) -> None:
    """The decision that preempts a rider relabels the host that stays; the rider's drain
    (its grace period) no longer slows the host -- the simulator's partner leaves at once,
    and a rider that stays is treated the same way when its host is preempted."""
    host, rider = _job(svc, LM), _job(svc, RESNET)
    _start(svc, host, 0.0)
    _start(svc, rider, 10.0, mate=host)
    with svc.store.tx() as db:  # the decision at 100 s: bank, relabel the host, stop the rider
        svc.speeds.settle_all(svc.store, db, 100.0, {host, rider})
        svc.store.set_allocation(db, host, 1, colocated_with="")
    _stop(svc, rider)
    assert _done(svc, host, 105.0) == pytest.approx(10 * LM_ALONE + 90 * LM_PAIRED
                                                    + 5 * LM_ALONE)
    _end_stopped(svc, rider, 110.0)
    assert _done(svc, host, 120.0) == pytest.approx(10 * LM_ALONE + 90 * LM_PAIRED
                                                    + 20 * LM_ALONE)


def test_a_job_moving_onto_its_partner_does_not_pair_it_with_its_old_run(
        svc: LiveService) -> None:
    """Two jobs ran apart on one node; a decision pairs them, relabelling the stayer and moving
    the other, whose old run (written earlier, unlabelled) drains there first. The stayer runs
    alone until the new run joins, and the old run's end does not wipe the stayer's label."""
    mover, stayer = _job(svc, RESNET), _job(svc, LM)
    _start(svc, mover, 0.0)
    _start(svc, stayer, 1.0)
    with svc.store.tx() as db:  # the decision at 50 s
        svc.speeds.settle_all(svc.store, db, 50.0, {mover, stayer})
        svc.store.set_allocation(db, stayer, 1, colocated_with=mover)
    _stop(svc, mover)
    assert _done(svc, stayer, 55.0) == pytest.approx(54 * LM_ALONE)
    _end_stopped(svc, mover, 60.0)
    kept = svc.store.allocation(stayer, 1)
    assert kept is not None and kept.placement.colocated_with == (mover,)
    assert not any("to itself again" in e.detail for e in svc.store.events(stayer))
    _start(svc, mover, 60.0, mate=stayer, run=2)
    assert _done(svc, stayer, 70.0) == pytest.approx(59 * LM_ALONE + 10 * LM_PAIRED)
