"""``tessera explain`` names a queue's CPU/memory quota use (review5, item 1): a CPU-only job
held by its queue's ``cpus:`` quota was told ``at its CPU quota`` by its reason, but explain's
queue line spoke of GPUs only, so the numbers behind it were in ``/api/queues`` alone."""

from __future__ import annotations

from pathlib import Path

from tessera.live.explain import explain
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.live.visibility import queues_json
from tests.live.draining import DrainingExecutor, launch_then_cancel
from tests.live.helpers import make_service

A = Principal("a", "team-a")
B = Principal("b", "team-b")
JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 6, memory: 4Gi}\n"


def test_explain_names_the_cpu_and_memory_quota_use_of_a_cpu_only_jobs_queue(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       queues=[{"name": "team-a", "nominal_gpus": 4, "cpus": 8,
                                "memory": "32Gi"},
                               {"name": "team-b", "nominal_gpus": 4}], start=False)
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    launch_then_cancel(svc, ex, JOB, A)  # its run drains, still holding 6 CPUs and 4 GiB
    second = svc.submit(parse_request(JOB), A).job_id
    svc.round(12.0)
    rec = svc.store.get(second)
    assert rec is not None and rec.state.value == "pending"
    assert "at its CPU quota" in (rec.reason or "")
    out = explain(svc, rec, A)
    line = "queue team-a: its CPU-only jobs hold 6 of 8 CPUs (cpus quota), 4 of 32 GiB of " \
        "memory (memory quota)"
    assert line in out["lines"], out["lines"]
    (q,) = [q for q in queues_json(svc, A)["queues"] if q["name"] == "team-a"]
    assert out["queue_cpu_only"] == {k: q[k] for k in (
        "used_cpus", "nominal_cpus", "used_memory_gib", "nominal_memory_gib")}


def test_explain_says_no_cpu_quota_for_a_cpu_only_job_of_a_queue_without_one(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       queues=[{"name": "team-a", "nominal_gpus": 4},
                               {"name": "team-b", "nominal_gpus": 4}], start=False)
    rec = svc.store.get(svc.submit(parse_request(JOB), A).job_id)
    assert rec is not None
    out = explain(svc, rec, A)
    assert "queue team-a: its CPU-only jobs hold 0 CPUs (no cpus quota), 0 GiB of memory " \
        "(no memory quota)" in out["lines"], out["lines"]
    gpu = svc.store.get(svc.submit(parse_request(
        "name: g\nqueue: team-b\ncommand: 'sleep 1'\ngpus: 1\n"), B).job_id)
    assert gpu is not None  # a GPU job of a queue without CPU-only jobs or quota: no such line
    assert not any("CPU-only" in line for line in explain(svc, gpu, B)["lines"])
