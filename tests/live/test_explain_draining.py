"""``tessera explain``'s what-if round sees the quota a stopping run still holds (review4,
item 3): its snapshot lacked ``Snapshot.host_draining`` (and ``gpu_draining``), so for a job
that waits because its queue's draining run still holds the quota, ``explain`` said it fit
now -- while every round kept it waiting."""

from __future__ import annotations

from pathlib import Path

from tessera.live.explain import explain
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.draining import DrainingExecutor, launch_then_cancel
from tests.live.helpers import make_service
from tests.live.test_cpu_quota_drain import CPU_JOB

A = Principal("a", "team-a")


def _cancel_then_resubmit(svc: LiveService, text: str) -> str:
    """Run one job, cancel it (its run drains), submit the same again; one round."""
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    launch_then_cancel(svc, ex, text, A)
    second = svc.submit(parse_request(text), A).job_id
    svc.round(12.0)
    svc.act(12.0)
    assert second not in ex.launched
    return second


def _explained(svc: LiveService, job_id: str) -> dict[str, object]:
    rec = svc.store.get(job_id)
    assert rec is not None and rec.state.value == "pending"
    return explain(svc, rec, A)


def test_explain_does_not_say_a_cpu_only_job_fits_while_its_queues_draining_run_holds_the_quota(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       queues=[{"name": "team-a", "nominal_gpus": 4, "cpus": 8},
                               {"name": "team-b", "nominal_gpus": 4}], start=False)
    second = _cancel_then_resubmit(svc, CPU_JOB)
    out = _explained(svc, second)
    assert out["would_fit_now"] is None, out["lines"]
    assert "fifo would not start it now" in out["lines"], out["lines"]


def test_explain_does_not_say_a_gpu_job_fits_while_its_queues_draining_run_holds_the_quota(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       queues=[{"name": "team-a", "nominal_gpus": 2, "borrowing_limit_gpus": 0},
                               {"name": "team-b", "nominal_gpus": 2}], start=False)
    second = _cancel_then_resubmit(
        svc, "name: g\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 2\n")
    out = _explained(svc, second)
    assert out["would_fit_now"] is None, out["lines"]
    lines = out["lines"]
    assert isinstance(lines, list)
    # the quota line counts the cancelled job's draining run, as /api/queues does
    assert "queue team-a: 2 of 2 nominal GPUs in use, borrowing limit 0" in lines, lines
