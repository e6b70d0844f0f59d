"""``/metrics`` values after what a service lives through: submissions, a job held by its
queue's quota, a preemption, a cancel, a failed run retried, a lost run, a restart; and a
per-flavor quota shown per flavor. Scraped with ``prometheus_client``'s parser."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
from dataclasses import replace
from pathlib import Path

from tessera.live import lifecycle
from tessera.live.executors.base import RunStatus
from tessera.live.journal import request_stop
from tessera.live.metrics import ServiceMetrics, active_jobs, preempt_reason
from tessera.live.progress import RunRate
from tessera.live.service import LiveService
from tessera.live.spec import parse_request, to_live_job
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId, JobState
from tessera.sched.core.decide import Decision
from tessera.sched.core.quotas import (
    Cohort,
    FlavorQuota,
    QueuePreemption,
    QueueQuota,
    ReclaimWithinCohort,
)
from tessera.sched.core.reasons import PendingKind, PendingReason
from tessera.sched.core.snapshot import Placement
from tessera.sched.core.tenancy import Tenancy
from tests.live.helpers import make_service, wait_for
from tests.live.metrics_scrape import Scrape
from tests.live.test_jobcodec import OLD_STATE

ADMIN = Principal("admin", None)
#: Two small queues on a 2-GPU cluster: each may hold 2 GPUs (1 nominal + 1 borrowed).
QUEUES: list[dict[str, object]] = [
    {"name": "team-a", "nominal_gpus": 1, "borrowing_limit_gpus": 1},
    {"name": "team-b", "nominal_gpus": 1, "borrowing_limit_gpus": 1},
]
V100 = resolve_flavor("v100").short


def _submit(svc: LiveService, text: str) -> str:
    return svc.submit(parse_request(text), ADMIN).job_id


def _state(svc: LiveService, job_id: str) -> str:
    rec = svc.store.get(job_id)
    return rec.state.value if rec is not None else "gone"


def _run_state(svc: LiveService, job_id: str, run: int) -> str | None:
    a = svc.store.allocation(job_id, run)
    return a.status if a is not None else None


def _scrape(m: ServiceMetrics) -> Scrape:
    return Scrape(m.render().decode())


def test_metrics_follow_quota_preemption_cancel_and_retry(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:2", policy="srtf",
                       gpus_per_server=2, queues=QUEUES)
    m = ServiceMetrics(svc)
    try:
        long_id = _submit(svc, "name: long\nqueue: team-a\ngpus: 2\nexpected_duration_s: 1000"
                               "\ncommand: sleep 60")
        wait_for(lambda: _state(svc, long_id) == "running", what="the long job to run")
        # A second team-a job: the queue holds 2 GPUs of its 1 + 1 borrowable: quota.
        waiter = _submit(svc, "name: waiter\nqueue: team-a\nexpected_duration_s: 1000\n"
                              "command: sleep 60")
        wait_for(lambda: "at quota" in (svc.store.get(waiter).reason  # type: ignore[union-attr]
                                        ), what="the waiter's quota reason")
        s = _scrape(m)
        assert s.value("tessera_jobs_pending", queue="team-a", flavor="any",
                       reason="quota") == 1
        assert s.value("tessera_jobs_running", queue="team-a", flavor=V100) == 1
        assert s.value("tessera_queue_nominal_gpus", queue="team-a", flavor="any") == 1
        assert s.value("tessera_queue_borrowing_limit_gpus", queue="team-a", flavor="any") == 1
        assert s.value("tessera_queue_used_gpus", queue="team-a", flavor="any") == 2
        assert s.value("tessera_queue_borrowed_gpus", queue="team-a", flavor="any") == 1
        assert s.value("tessera_queue_used_gpus", queue="team-b", flavor="any") == 0
        assert s.value("tessera_cluster_gpus", flavor=V100) == 2
        assert s.value("tessera_job_transitions_total", from_state="none",
                       to_state="pending") == 2
        assert s.value("tessera_job_transitions_total", from_state="running",
                       to_state="preempted") is None

        svc.cancel(waiter, ADMIN)  # a cancel while pending
        # A short team-b job: srtf preempts the long one for it.
        short = _submit(svc, "name: short\nqueue: team-b\nexpected_duration_s: 1\n"
                             "command: sleep 0.3")
        wait_for(lambda: _state(svc, short) == "succeeded", what="the short job")
        wait_for(lambda: _run_state(svc, long_id, 2) == "running", what="the long job back")
        s = _scrape(m)
        assert s.value("tessera_preemptions_total", reason="policy") == 1
        assert s.value("tessera_job_transitions_total", from_state="running",
                       to_state="preempted") == 1
        assert s.value("tessera_job_transitions_total", from_state="pending",
                       to_state="cancelled") == 1
        assert s.total("tessera_jobs_pending") == 0
        assert s.value("tessera_jobs_running", queue="team-a", flavor=V100) == 1
        assert s.value("tessera_queue_used_gpus", queue="team-b", flavor="any") == 0

        svc.cancel(long_id, ADMIN)  # a cancel while running: its run drains
        wait_for(lambda: _run_state(svc, long_id, 2) == "done", what="the long run to end")
        bad = _submit(svc, "name: bad\nqueue: team-b\nmax_retries: 1\ncommand: exit 3")
        wait_for(lambda: _state(svc, bad) == "failed" and svc.store.get(bad).final,  # type: ignore[union-attr]
                 what="the failing job to give up")
        s = _scrape(m)
        assert s.value("tessera_job_retries_total") == 1
        assert s.value("tessera_job_transitions_total", from_state="failed",
                       to_state="pending") == 1
        assert s.value("tessera_job_transitions_total", from_state="running",
                       to_state="failed") == 2
        assert s.value("tessera_job_transitions_total", from_state="running",
                       to_state="cancelled") == 1
        assert s.value("tessera_job_transitions_total", from_state="none",
                       to_state="pending") == 4
        assert s.value("tessera_runs_lost_total") == 0
        assert s.total("tessera_jobs_running") == 0
        assert s.value("tessera_queue_used_gpus", queue="team-a", flavor="any") == 0
        decisions = s.value("tessera_decision_duration_seconds_count")
        assert decisions is not None and decisions >= 3
        assert s.value("tessera_decision_duration_seconds_bucket", le="+Inf") == decisions
    finally:
        svc.stop()

    # A restart: the counters come back from the store's event log; the latency histogram
    # counts since the start.
    again = make_service(tmp_path / "state", cluster="v100:2", policy="srtf",
                         gpus_per_server=2, queues=QUEUES, start=False)
    try:
        r = _scrape(ServiceMetrics(again))
        for name in ("tessera_job_transitions_total", "tessera_preemptions_total",
                     "tessera_job_retries_total", "tessera_runs_lost_total"):
            assert r.series(name) == s.series(name), name
            assert r.total(name) == s.total(name), name
        assert r.value("tessera_decision_duration_seconds_count") == 0
    finally:
        again.stop()


def test_a_lost_run_is_counted_and_retried(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state")
    m = ServiceMetrics(svc)
    try:
        jid = _submit(svc, "name: victim\nqueue: team-a\nmax_retries: 1\ncommand: sleep 60")
        run_dir = svc.work_dir / "runs" / jid / "1"
        wait_for(lambda: (run_dir / "ranks.json").exists() and _state(svc, jid) == "running",
                 what="the run to start")
        ranks = json.loads((run_dir / "ranks.json").read_text())
        os.kill(int((run_dir / "marker").read_text()), signal.SIGKILL)  # the runner vanishes
        for pid in ranks:
            os.killpg(pid, signal.SIGKILL)
        wait_for(lambda: _run_state(svc, jid, 2) is not None, what="the retry")
        s = _scrape(m)
        assert s.value("tessera_runs_lost_total") == 1
        assert s.value("tessera_job_retries_total") == 1
        a = svc.store.allocation(jid, 1)
        assert a is not None and a.exit_code is None and "vanished" in a.detail
        svc.cancel(jid, ADMIN)
    finally:
        svc.stop()


def test_per_flavor_quota_shows_per_flavor(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", start=False)
    v100, t4 = resolve_flavor("v100"), resolve_flavor("t4")
    # team-a borrows one V100 of team-b's idle quota through their cohort (a queue with no
    # cohort borrows nothing); one tree counts GPUs one way, so team-b is per flavor too.
    per_flavor = QueueQuota.per_flavor("team-a", {v100: FlavorQuota(2, 1), t4: FlavorQuota(1, 0)},
                                       cohort="c")
    lender = QueueQuota.per_flavor("team-b", {v100: FlavorQuota(4)}, cohort="c")
    quotas = {**svc.tenancy.quotas, "team-a": per_flavor, "team-b": lender}
    svc.tenancy = replace(svc.tenancy, quotas=quotas,
                          tree=Tenancy(queues=quotas, cohorts={"c": Cohort("c")}))
    svc.start()
    m = ServiceMetrics(svc)
    try:
        jid = _submit(svc, "name: big\nqueue: team-a\ngpus: 3\nflavors: [v100]\n"
                           "command: sleep 30")
        wait_for(lambda: _state(svc, jid) == "running", what="the job to run")
        s = _scrape(m)
        assert s.value("tessera_queue_nominal_gpus", queue="team-a", flavor=V100) == 2
        assert s.value("tessera_queue_borrowing_limit_gpus", queue="team-a", flavor=V100) == 1
        assert s.value("tessera_queue_used_gpus", queue="team-a", flavor=V100) == 3
        assert s.value("tessera_queue_borrowed_gpus", queue="team-a", flavor=V100) == 1
        assert s.value("tessera_queue_nominal_gpus", queue="team-a", flavor=t4.short) == 1
        assert s.value("tessera_queue_borrowing_limit_gpus", queue="team-a",
                       flavor=t4.short) == 0
        assert s.value("tessera_queue_used_gpus", queue="team-a", flavor=t4.short) == 0
        assert s.value("tessera_queue_nominal_gpus", queue="team-a", flavor="any") is None
        assert s.value("tessera_queue_nominal_gpus", queue="team-b", flavor=V100) == 4
        assert s.value("tessera_jobs_running", queue="team-a", flavor=V100) == 1
        waiting = _submit(svc, "name: later\nqueue: team-b\nflavors: [v100]\ngpus: 2\n"
                               "command: sleep 1")
        s = _scrape(m)  # the flavor it asks for; not decided yet, or no free V100
        reasons = {x["reason"] for x in s.series("tessera_jobs_pending")
                   if x["queue"] == "team-b" and x["flavor"] == V100}
        assert reasons and reasons <= {"undecided", "capacity", "quota"}
        svc.cancel(waiting, ADMIN)
        svc.cancel(jid, ADMIN)
    finally:
        svc.stop()


def test_preemption_reasons_read_the_journals_words() -> None:
    assert preempt_reason("preempted by the policy") == "policy"
    assert preempt_reason("moving to 2×V100 on n0") == "move"
    assert preempt_reason("resizing (4 → 2 GPUs) to 2×V100 on n0") == "resize"
    assert preempt_reason("something new") == "other"


def test_event_log_counters_from_the_lifecycles_own_records(tmp_path: Path) -> None:
    """Withdrawn plans and stop requests are preemptions by reason, a run without an exit
    status is lost (a withdrawn plan is not), a retry is counted once; incrementally and
    afresh alike."""
    svc = make_service(tmp_path / "state", start=False)
    store, now = svc.store, 1000.0
    v100 = resolve_flavor("v100")

    def placed(text: str, running: bool) -> str:
        jid = _submit(svc, text)
        with store.tx() as db:
            store.add_allocation(db, jid, 1, Placement.of(v100, (("n0", 1),)), now)
            store.transition(db, jid, JobState.ADMITTED, now, "run 1", runs=1)
            if running:
                a = store.allocation(jid, 1)
                assert a is not None
                lifecycle.mark_running(store, db, a, now, "started", svc.speeds)
        return jid

    def end(jid: str, st: RunStatus) -> None:
        a = store.allocation(jid, 1)
        assert a is not None
        with store.tx() as db:
            lifecycle.finish_run(store, db, a, st, now + 1, svc.speeds)

    planned = placed("name: p\nqueue: team-a\ncommand: sleep 1", running=False)
    with store.tx() as db:
        request_stop(svc, db, JobId(planned), now, "preempted by the policy", "preempt")
    lost = placed("name: l\nqueue: team-a\nmax_retries: 1\ncommand: sleep 1", running=True)
    end(lost, RunStatus("lost", detail="runner 42 vanished without an exit status"))
    m = ServiceMetrics(svc)
    s = _scrape(m)
    assert s.series("tessera_preemptions_total") == [{"reason": "policy"}]
    assert s.value("tessera_preemptions_total", reason="policy") == 1
    assert s.value("tessera_runs_lost_total") == 1
    assert s.value("tessera_job_retries_total") == 1

    crashed = placed("name: c\nqueue: team-b\ncommand: exit 3", running=True)
    end(crashed, RunStatus("exited", 3))
    moved = placed("name: m\nqueue: team-b\ncommand: sleep 9", running=True)
    with store.tx() as db:
        request_stop(svc, db, JobId(moved), now, "moving to 1×V100 on n1", "move")
    end(moved, RunStatus("exited", -15, stopped=True))
    s = _scrape(m)
    assert s.value("tessera_preemptions_total", reason="policy") == 1
    assert s.value("tessera_preemptions_total", reason="move") == 1
    assert s.value("tessera_runs_lost_total") == 1  # an exit status is no loss
    assert s.value("tessera_job_retries_total") == 1
    assert s.value("tessera_job_transitions_total", from_state="running", to_state="failed") == 2
    fresh = _scrape(ServiceMetrics(svc))
    for name in ("tessera_preemptions_total", "tessera_runs_lost_total",
                 "tessera_job_retries_total", "tessera_job_transitions_total"):
        assert fresh.series(name) == s.series(name) and fresh.total(name) == s.total(name)
    store.close()


def test_active_jobs_read_both_stored_formats(tmp_path: Path) -> None:
    """The flavor label comes from the stored JSON without decoding it: format 2 (today's)
    and format 1 (a state file written by an older release, where an alias was stored)."""
    path = tmp_path / "state.db"
    shutil.copy(OLD_STATE, path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE jobs SET spec_json=json_set(spec_json, '$.flavors', "
                   "json_array('v100')) WHERE job_id='j-plain'")
    store = Store(path)
    svc_job = _submit_stored(store, "name: new\nqueue: q-a\nflavors: [t4]\ncommand: 'true'")
    got = {a.job_id: (a.queue, a.state.value, a.flavor) for a in active_jobs(store)}
    assert got == {"j-plain": ("q-a", "pending", V100),
                   "j-rich": ("q-share", "pending", None),  # two flavors
                   "j-elastic": ("q-a", "pending", None), "j-3d": ("q-a", "pending", None),
                   svc_job: ("q-a", "pending", resolve_flavor("t4").short)}
    store.close()


def _submit_stored(store: Store, text: str) -> str:
    job = to_live_job(parse_request(text), "j-new", "q-a", 20.0, False)
    return store.add_job(job, 20.0).job_id


def test_pending_reason_labels(tmp_path: Path) -> None:
    """The last decision's kind, ``unplaceable`` while the executor's backoff lasts (it wins
    over an older decision), ``undecided`` before any decision saw the job."""
    svc = make_service(tmp_path / "state", start=False)
    held, backing_off, _fresh = (_submit(svc, f"name: {n}\nqueue: team-a\ncommand: 'true'")
                                for n in ("held", "backing-off", "fresh"))
    svc.last_decision = Decision({}, (), (), {
        JobId(held): PendingReason(PendingKind.QUOTA),
        JobId(backing_off): PendingReason(PendingKind.CAPACITY)})
    svc.backoff[backing_off] = (svc.clock() + 60, 5.0)
    s = _scrape(ServiceMetrics(svc))
    assert {x["reason"]: s.value("tessera_jobs_pending", **x)
            for x in s.series("tessera_jobs_pending")} == {
        "quota": 1, "unplaceable": 1, "undecided": 1}
    svc.store.close()


def test_a_reclaim_is_a_quota_preemption_in_the_events_and_metrics(tmp_path: Path) -> None:
    """A queue taking back its lent quota stops the borrower with the queue rules' reason,
    counted as reason="quota" (not "policy")."""
    svc = make_service(tmp_path / "state", cluster="v100:4", start=False)
    reclaim = QueuePreemption(ReclaimWithinCohort.ANY)
    quotas = {"team-a": QueueQuota("team-a", 2, None, cohort="c"),
              "team-b": QueueQuota("team-b", 2, None, cohort="c", preemption=reclaim)}
    svc.tenancy = replace(svc.tenancy, quotas=quotas,
                          tree=Tenancy(queues=quotas, cohorts={"c": Cohort("c")}))
    svc.start()
    m = ServiceMetrics(svc)
    try:
        big = _submit(svc, "name: big\nqueue: team-a\ngpus: 4\ncommand: sleep 30")
        wait_for(lambda: _state(svc, big) == "running", what="the borrower to run")
        small = _submit(svc, "name: small\nqueue: team-b\ngpus: 2\ncommand: sleep 30")
        wait_for(lambda: _state(svc, small) == "running", 30, "the reclaim")
        stops = [e.detail for e in svc.store.events(big) if e.kind == "stop-requested"]
        assert stops and "quota preemption: to admit" in stops[0]
        s = _scrape(m)
        assert s.value("tessera_preemptions_total", reason="quota") == 1
        assert s.value("tessera_preemptions_total", reason="policy") is None
        svc.cancel(big, ADMIN)
        svc.cancel(small, ADMIN)
    finally:
        svc.stop()


def test_running_jobs_show_predicted_and_measured_speeds(tmp_path: Path) -> None:
    """Issue 35: /metrics shows a running job's prior speed and, once it reports, its measured
    one on the flavor it runs on."""
    svc = make_service(tmp_path / "state")
    m = ServiceMetrics(svc)
    try:
        jid = _submit(svc, "name: s\nqueue: team-a\ngpus: 1\nflavors: [v100]\ncommand: sleep 30")
        wait_for(lambda: _state(svc, jid) == "running", what="the job to run")
        s = _scrape(m)
        assert s.value("tessera_job_speed_steps_per_s", job=jid, queue="team-a", flavor=V100,
                       source="predicted") == 1.0  # no table knows a plain command: prior 1
        assert s.value("tessera_job_speed_steps_per_s", job=jid, queue="team-a", flavor=V100,
                       source="measured") is None
        run = next(a for a in svc.store.allocations(("running",)) if a.job_id == jid)
        now = svc.clock()
        svc.progress._keep(jid, RunRate(run.run, resolve_flavor("v100"), ("n0",), 7.5, 5,
                                        now - 10, now))
        s = _scrape(m)
        assert s.value("tessera_job_speed_steps_per_s", job=jid, queue="team-a", flavor=V100,
                       source="measured") == 7.5
        svc.cancel(jid, ADMIN)
        wait_for(lambda: _state(svc, jid) == "cancelled", what="the cancel")
        assert not _scrape(m).series("tessera_job_speed_steps_per_s")
    finally:
        svc.stop()
