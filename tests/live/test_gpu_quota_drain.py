"""A queue's GPU quota counts its runs that are still stopping (inside their grace period).

A stopping run's job is left out of the decision core's snapshot (it may not be placed again
yet) and its GPUs are not free (``live.view.free_gpus``), so nobody is placed *on* them -- but
the quota book charged only the jobs it saw. A tenant at its nominal GPU quota (no borrowing)
that cancelled a job and submitted another got the new one planned and launched on other free
GPUs at once: its queue held twice its quota for each grace period, and for as long as it keeps
cancelling and resubmitting (review4, item 1)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tessera.live.drain_quota import draining_gpu_use
from tessera.live.metrics import ServiceMetrics
from tessera.live.spec import parse_request
from tessera.live.store import Allocation
from tessera.live.tenancy import Principal
from tessera.live.visibility import queues_json
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.live.draining import DrainingExecutor, launch_then_cancel
from tests.live.helpers import make_service
from tests.live.metrics_scrape import Scrape

A = Principal("a", "team-a")
QUEUES: list[dict[str, object]] = [{"name": "team-a", "nominal_gpus": 2, "borrowing_limit_gpus": 0},
                                   {"name": "team-b", "nominal_gpus": 2}]
GPU_JOB = "name: g\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 2\n"


def test_a_cancelled_gpu_run_still_draining_counts_against_its_queues_gpu_quota(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       queues=QUEUES, start=False)  # two servers of 2 GPUs
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    first = launch_then_cancel(svc, ex, GPU_JOB, A)  # its run drains, holding its 2 GPUs
    second = svc.submit(parse_request(GPU_JOB), A).job_id
    svc.round(12.0)
    svc.act(12.0)
    svc.act(12.5)
    assert second not in ex.launched  # team-a's 2 GPUs are still held by the draining run
    assert svc.store.allocation(second, 1) is None  # not even planned onto team-b's GPUs
    rec = svc.store.get(second)
    assert rec is not None and rec.state.value == "pending"
    (q,) = [q for q in queues_json(svc, A)["queues"] if q["name"] == "team-a"]
    assert (q["used_gpus"], q["nominal_gpus"]) == (2, 2)
    ex.exited.add((first, 1))
    svc.observe(13.0)
    svc.round(13.0)
    svc.act(13.0)
    svc.act(13.5)
    assert second in ex.launched  # once it exited, the quota is free again


def test_metrics_and_api_queues_agree_on_a_cancelled_jobs_draining_run(tmp_path: Path) -> None:
    """``tessera_queue_used_gpus`` and ``/api/queues``' ``used_gpus`` both count a cancelled
    job's run that still drains (no longer active, still holding its GPUs) -- and a running
    one beside it."""
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       queues=[{"name": "team-a", "nominal_gpus": 2, "borrowing_limit_gpus": 2},
                               {"name": "team-b", "nominal_gpus": 2}], start=False)
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    first = svc.submit(parse_request(GPU_JOB), A).job_id
    second = svc.submit(parse_request(GPU_JOB), A).job_id
    svc.round(10.0)
    svc.act(10.0)
    svc.act(10.5)
    assert sorted(ex.launched) == sorted([first, second])
    svc.cancel(first, A)
    svc.act(11.0)  # first drains, second runs: team-a holds 4 GPUs
    (q,) = [q for q in queues_json(svc, A)["queues"] if q["name"] == "team-a"]
    scrape = Scrape(ServiceMetrics(svc).render().decode())
    assert q["used_gpus"] == 4
    assert scrape.value("tessera_queue_used_gpus", queue="team-a", flavor="any") == 4
    assert scrape.value("tessera_queue_borrowed_gpus", queue="team-a", flavor="any") == 2


class _Queues:
    """A store stand-in: ``get`` gives each job's queue (all ``draining_gpu_use`` reads)."""

    def __init__(self, queues: dict[str, str]) -> None:
        self.queues = queues

    def get(self, job_id: str) -> SimpleNamespace | None:
        q = self.queues.get(job_id)
        return None if q is None else SimpleNamespace(queue=q)


def _run(job: str, node: str, gpus: int, status: str) -> Allocation:
    return Allocation(job, 1, Placement.of(resolve_flavor("V100"), ((node, gpus),)), status,
                      None, 1.0, 1.0, None, None, "")


def test_a_draining_run_whose_gpus_a_planned_run_took_is_not_charged_twice() -> None:
    """A reclaim plans the new run onto the victim's GPUs (it launches once the victim
    exits): those GPUs are charged to the new run's queue, not to both queues."""
    cluster = load_cluster("v100:4", 2)  # two servers of 2 GPUs
    nodes = [n.node_id for n in cluster.nodes]
    store = _Queues({"victim": "team-a", "cancelled": "team-a", "new": "team-b"})
    holding = [_run("victim", nodes[0], 2, "stopping"), _run("new", nodes[0], 2, "planned"),
               _run("cancelled", nodes[1], 2, "stopping")]
    out = draining_gpu_use(store, holding, {"new"}, cluster)  # type: ignore[arg-type]
    assert [(q, p.num_gpus, p.gpus_by_node[0][0]) for q, p in out] == [
        ("team-a", 2, nodes[1])]  # the cancelled run's GPUs nobody else claims
