"""A restart whose executor lost every run with the service (the embedded Ray head was gone):
the runs are requeued as preempted, never charged to the jobs' retry budgets."""

from __future__ import annotations

from pathlib import Path

from tessera.live import lifecycle
from tessera.live.executors.local import LocalExecutor
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service, wait_for

ADMIN = Principal("admin", None)


class ForgetfulExecutor(LocalExecutor):
    """Knows no run at all, and says its cluster was started afresh."""

    runs_lost_with_cluster = True


def _running_job(tmp_path: Path) -> tuple[Path, str]:
    """A job recorded as running (run 1), whose run the next executor will not know."""
    state = tmp_path / "state"
    svc = make_service(state, start=False)
    jid = svc.submit(parse_request("name: n\nqueue: team-a\nmax_retries: 0\n"
                                   "command: sleep 60"), ADMIN).job_id
    svc.round(svc.clock())
    [a] = svc.store.allocations(job_id=jid)
    with svc.store.tx() as db:
        lifecycle.mark_running(svc.store, db, a, svc.clock(), "run 1 launched", svc.speeds)
    return state, jid


def test_runs_lost_with_the_cluster_are_requeued_without_a_retry(tmp_path: Path) -> None:
    state, jid = _running_job(tmp_path)
    svc = make_service(state, start=False)
    svc.executor = ForgetfulExecutor(state / "runs")
    svc.start()
    try:
        rec = svc.store.get(jid)
        assert rec is not None and rec.attempts == 0 and not rec.final
        states = [e.to_state for e in svc.store.events(jid) if e.to_state]
        assert states[:5] == ["pending", "admitted", "running", "preempted", "pending"]
        assert "failed" not in states
        wait_for(lambda: svc.store.get(jid).runs == 2, 20, "run 2")  # type: ignore[union-attr]
    finally:
        svc.stop()


def test_an_executor_that_merely_lost_a_run_still_fails_it(tmp_path: Path) -> None:
    state, jid = _running_job(tmp_path)
    svc = make_service(state, start=False)
    svc.start()
    try:
        rec = svc.store.get(jid)
        assert rec is not None and rec.state.value == "failed" and rec.attempts == 1
    finally:
        svc.stop()
