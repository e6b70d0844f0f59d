"""Review5, item 2: the launch gate for CPUs a stopping run holds (:mod:`tessera.live.host_drain`)
and runs sharing GPUs (a packing policy's pairs).

The reviewer suspected that two runs on one GPU set were counted as two CPU holders, delaying a
launch until the stopping run exits. They are -- and rightly: each run of a pair is its own
process with its own CPUs (the local executor pins each run's ``host`` amounts on CPU ids of
its own, :func:`tessera.live.executors.host_limits.choose_cpus`), and the decision core books
both (``HostFree.of_snapshot`` charges every running job), so the gate only adds the stopping
run, which really holds its CPUs. The review found the opposite defect instead: a rider
launched in a pass was not counted by the runs the gate checked after it in the same pass
(the stale ``holding`` still said planned), so a run launched onto CPUs the rider had just
taken."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.model.jobs import JobId, JobState
from tests.live.draining import SharingDrainingExecutor
from tests.live.helpers import make_service

ADMIN = Principal("admin", None)
HEAD = "queue: team-a\ncommand: 'sleep 100'\n"


def _job(svc: LiveService, name: str, gpus: int, cpus: int) -> str:
    text = f"name: {name}\n{HEAD}gpus: {gpus}\nhost: {{cpus: {cpus}, memory: 1Gi}}\n"
    return svc.submit(parse_request(text), ADMIN).job_id


def _plan(svc: LiveService, job_id: str, like: str, now_s: float, cpus: float | None = None,
          share: str | None = None) -> None:
    """Write a planned run of ``job_id`` on the GPUs of ``like``'s run 1 (a CPU-only one with
    ``cpus``; sharing them with ``share``), as a decision would, and admit the job."""
    base = svc.store.allocation(like, 1)
    assert base is not None
    p = base.placement
    if cpus is not None:
        p = replace(p, host_by_node=tuple((n, float(cpus), 1.0) for n, _c, _m in p.host_by_node))
    if share is not None:
        p = replace(p, colocated_with=(JobId(share),))
    with svc.store.tx() as db:
        svc.store.add_allocation(db, job_id, 1, p, now_s)
        svc.store.transition(db, job_id, JobState.ADMITTED, now_s, "planned")


def _setup(tmp_path: Path) -> tuple[LiveService, SharingDrainingExecutor, str, str]:
    """One 2-GPU server of 16 CPUs: a 1-GPU run ``host`` of 4 CPUs running, a CPU-only run of
    4 CPUs cancelled and still draining there."""
    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2,
                       policy="hetero_pack", start=False)
    assert [n.cpu_cores for n in svc.cluster.nodes] == [16]
    ex = SharingDrainingExecutor()
    svc.executor = ex
    stopping = _job(svc, "s", 0, 4)
    host = _job(svc, "h", 1, 4)
    svc.round(10.0)
    svc.act(10.0)
    svc.act(10.5)
    assert sorted(ex.launched) == sorted([stopping, host])
    svc.cancel(stopping, ADMIN)
    assert [a.job_id for a in svc.store.allocations(("stopping",))] == [stopping]
    return svc, ex, stopping, host


def test_a_rider_launched_in_a_pass_counts_for_the_runs_checked_after_it(tmp_path: Path) -> None:
    """16 CPUs: the draining run 4, the host 4; a rider of 4 on the host's GPU and a CPU-only
    run of 8 planned in one round (the decision counted the draining run's 4 free). Only one
    may launch before the draining run exits: 4 + 4 + 4 + 8 = 20 > 16."""
    svc, ex, stopping, host = _setup(tmp_path)
    rider = _job(svc, "r", 1, 4)
    late = _job(svc, "x", 0, 8)
    _plan(svc, rider, host, 19.0, share=host)  # (checked first: planned earlier)
    _plan(svc, late, stopping, 20.0, cpus=8)
    svc.act(20.0)
    assert rider in ex.launched  # 16 - 4 - 4 leaves its 4
    assert late not in ex.launched, "launched onto the CPUs the rider had just taken"
    ex.exited.add((stopping, 1))
    svc.observe(21.0)
    svc.act(21.0)
    assert late in ex.launched  # once the draining run exited: 16 - 4 - 4 - 8 = 0


def test_a_running_pair_counts_both_runs_cpus_as_each_run_holds_its_own(
        tmp_path: Path) -> None:
    """The reviewer's case: a running pair (host and rider, 4 CPUs each, each pinned on CPU ids
    of its own) beside the draining run of 4: a CPU-only run of 4 launches at once (16 - 12),
    one of 8 waits for the draining run to exit -- the pair's two runs really hold 8."""
    svc, ex, stopping, host = _setup(tmp_path)
    rider = _job(svc, "r", 1, 4)
    _plan(svc, rider, host, 20.0, share=host)
    svc.act(20.0)
    svc.act(20.5)
    assert rider in ex.launched
    small, big = _job(svc, "x4", 0, 4), _job(svc, "x8", 0, 8)
    _plan(svc, small, stopping, 30.0, cpus=4)
    svc.act(30.0)
    assert small in ex.launched  # the pair is not over-counted: 16 - 4 - 4 - 4 = 4 fit
    ex.exited.add((small, 1))
    svc.observe(31.0)
    _plan(svc, big, stopping, 32.0, cpus=8)
    svc.act(32.0)
    assert big not in ex.launched  # 16 - 4 (draining) - 8 (the pair) = 4 < 8
    ex.exited.add((stopping, 1))
    svc.observe(33.0)
    svc.act(33.0)
    assert big in ex.launched
