"""Review of CPU-only jobs (``gpus: 0``) as a tenant can submit them: GPU-only fields are
refused at the edge, and what one queue's CPU-only jobs can do to another queue's GPU jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.sched.core.cpu_yield import YIELD_EXEMPT_S
from tests.live.draining import DrainingExecutor
from tests.live.helpers import make_service

TEAM_A = Principal("a", "team-a")
TEAM_B = Principal("b", "team-b")
CPU_JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 16}\n"


@pytest.mark.parametrize(("extra", "field"), [
    ("exclusive: true\n", "exclusive"), ("exclusive: false\n", "exclusive"),
    ("requires_locality: true\n", "requires_locality")])
def test_a_cpu_only_job_refuses_gpu_sharing_and_locality_fields(extra: str, field: str) -> None:
    """``exclusive`` (GPU sharing) and ``requires_locality`` (a gang on one node) mean nothing
    for a job with no GPUs on one server; they were accepted silently."""
    with pytest.raises(SpecError, match=f"a CPU-only job \\(gpus: 0\\) cannot set {field}"):
        parse_request(CPU_JOB + extra)


def test_a_gpu_job_keeps_its_exclusive_and_locality_fields() -> None:
    req = parse_request("name: g\ncommand: 'true'\ngpus: 2\nexclusive: true\n"
                        "requires_locality: true\n")
    assert req.exclusive is True and req.requires_locality is True


def test_cpu_only_jobs_of_one_queue_do_not_starve_another_queues_gpu_job(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       start=False)  # two servers of 2 GPUs and 16 CPUs; 4 GPUs per queue
    hogs = [svc.submit(parse_request(CPU_JOB), TEAM_A).job_id for _ in range(2)]
    svc.round(10.0)
    assert all(svc.store.allocation(j, 1) is not None for j in hogs)  # every CPU taken
    gid = svc.submit(parse_request("name: g\nqueue: team-b\ncommand: 'sleep 100'\ngpus: 1\n"),
                     TEAM_B).job_id
    svc.round(20.0)  # the hogs started moments ago: exempt from giving way (churn)
    assert svc.store.allocation(gid, 1) is None
    for t_s in (30.0, 40.0, 50.0):
        svc.round(t_s + YIELD_EXEMPT_S)
    assert svc.store.allocation(gid, 1) is not None  # team-b's 1 GPU of its 4 nominal
    # One hog gave way (the fewest: one frees the 8 CPUs 1 GPU needs), and says for whom.
    said = [e.detail for h in hogs for e in svc.store.events(h)
            if "quota preemption" in e.detail]
    assert said and all(f"GPU job {gid} (queue 'team-b'" in d for d in said)
    assert sum(svc.store.get(h).state.value == "pending" for h in hogs) == 1  # type: ignore[union-attr]


def test_a_cpu_only_jobs_progress_reports_are_no_gpu_speed_evidence(tmp_path: Path) -> None:
    """A CPU-only run's placement names its server's GPU flavor for display only; its reports
    were kept as a measured rate *on that GPU flavor* (an event 'measured ... steps/s on
    V100-16GB', the oracle's overlay, and slow-node evidence against the server when its
    job_type has a GPU profile: a tenant's CPU-bound steps then read as a slow GPU)."""
    from tessera.live import lifecycle
    from tessera.model.jobs import JobState

    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, policy="fifo",
                       start=False)
    jid = svc.submit(parse_request(CPU_JOB + "job_type: resnet\n"), TEAM_A).job_id
    svc.round(10.0)
    a = svc.store.allocation(jid, 1)
    assert a is not None and a.placement.num_gpus == 0
    with svc.store.tx() as db:
        rec = svc.store.get(jid)
        if rec is not None and rec.state is JobState.PENDING:
            svc.store.transition(db, jid, JobState.ADMITTED, 10.0, "planned")
        lifecycle.mark_running(svc.store, db, a, 10.0, "launched", svc.speeds)
    tok = svc.progress.token(jid, 1)
    for k in range(5):
        out = svc.progress.report(jid, 1, tok, {"steps": 0.1 * k}, 20.0 + 2.0 * k)
        assert out.status == 200, out.detail
    assert svc.progress.measured(jid) == {}
    assert svc.progress.runs(jid) == []


def test_the_gpu_job_launches_only_once_the_cpu_only_run_it_displaced_has_exited(
        tmp_path: Path) -> None:
    """The GPU job is planned onto the CPUs a preempted CPU-only run still holds inside its
    grace period: it waits for that run to exit, as a run planned onto draining GPUs does
    (the launch gate counted GPUs only, and a CPU-only run holds none)."""
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       start=False)
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    hogs = [svc.submit(parse_request(CPU_JOB), TEAM_A).job_id for _ in range(2)]
    svc.round(10.0)
    svc.act(10.0)
    svc.act(10.5)  # confirmed: both running
    gid = svc.submit(parse_request("name: g\nqueue: team-b\ncommand: 'sleep 100'\ngpus: 1\n"),
                     TEAM_B).job_id
    began = [a.started_s for h in hogs if (a := svc.store.allocation(h, 1)) is not None]
    assert len(began) == 2 and None not in began  # (the service's clock: the wall's)
    t_s = max(b for b in began if b is not None) + YIELD_EXEMPT_S + 1.0  # (past the exemption)
    svc.round(t_s)
    stopping = [a for a in svc.store.allocations(("stopping",)) if a.job_id in hogs]
    assert len(stopping) == 1 and svc.store.allocation(gid, 1) is not None
    svc.act(t_s)
    svc.act(t_s + 1.0)
    assert gid not in ex.launched  # the displaced run still holds its 16 CPUs
    ex.exited.add((stopping[0].job_id, stopping[0].run))
    svc.observe(t_s + 2.0)
    svc.act(t_s + 2.0)
    assert gid in ex.launched
