"""Co-location in the live service: two runs on one GPU set (tessera.live.sharing)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tessera.errors import SpecError
from tessera.live.executors.gpu_sharing import mechanism
from tessera.live.executors.local import LocalExecutor
from tessera.live.options import ServiceOptions
from tessera.live.service import LiveService
from tessera.live.sharing import counted, relabels, riders
from tessera.live.spec import parse_request, to_live_job
from tessera.live.store import Allocation
from tessera.live.tenancy import CONFIG_NAME, Principal, load_tenancy
from tessera.live.view import free_gpus, queue_usage
from tessera.live.visibility import cluster_json
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import make_service, wait_for, write_config

_V100_16GB = resolve_flavor("V100-16GB")

ADMIN = Principal("admin", None)
SHARING = [{"name": "team-a", "nominal_gpus": 4, "borrowing_limit_gpus": 4, "sharing": True},
           {"name": "team-b", "nominal_gpus": 4, "borrowing_limit_gpus": 4}]
JOB = ("name: {name}\nqueue: {queue}\ncommand: {command}\nflavors: [V100]\n"
       "job_type: ResNet-18 (batch size 32)\nexpected_duration_s: 3\n")


def _submit(svc: LiveService, name: str, command: str = "sleep 2", queue: str = "team-a",
            extra: str = "") -> str:
    text = JOB.format(name=name, queue=queue, command=command) + extra
    return svc.submit(parse_request(text), ADMIN).job_id


def _all_end(svc: LiveService, *jobs: str) -> None:
    def ended() -> bool:
        return all((r := svc.store.get(j)) is not None and r.final for j in jobs)
    try:
        wait_for(ended, 40, "the jobs to end")
    except AssertionError:
        raise AssertionError([(e.job_id, e.kind, e.detail) for e in svc.store.events()]) \
            from None


def _kinds(svc: LiveService, jid: str, kind: str) -> list[str]:
    return [e.detail for e in svc.store.events(jid) if e.kind == kind]


def _overlap(svc: LiveService, a: str, b: str) -> bool:
    """Whether runs of ``a`` and ``b`` ran at the same time."""
    ra = [x for x in svc.store.allocations(("done",), job_id=a) if x.started_s]
    rb = [x for x in svc.store.allocations(("done",), job_id=b) if x.started_s]
    return any(x.started_s < (y.ended_s or 0) and y.started_s < (x.ended_s or 0)  # type: ignore[operator]
               for x in ra for y in rb)


@pytest.fixture
def one_gpu(tmp_path: Path) -> Iterator[LiveService]:
    """A one-V100 cluster under hetero_pack (1 s rounds), queue team-a sharing, team-b not."""
    svc = make_service(tmp_path / "state", cluster="v100:1", policy="hetero_pack",
                       queues=SHARING, gpus_per_server=1,
                       settings=SchedulerSettings(round_s=1.0))
    yield svc
    svc.stop()


def test_two_jobs_share_a_gpu_and_both_finish(one_gpu: LiveService) -> None:
    svc = one_gpu
    a, b = _submit(svc, "a"), _submit(svc, "b")
    _all_end(svc, a, b)
    for j in (a, b):
        rec = svc.store.get(j)
        assert rec is not None and rec.state.value == "succeeded" and rec.runs == 1
    assert _overlap(svc, a, b), "the two jobs never ran at the same time on the one GPU"
    sharing = _kinds(svc, a, "sharing") + _kinds(svc, b, "sharing")
    assert any("by time-slicing" in s and "sharing 1×V100-16GB" in s for s in sharing)
    assert any("joins its GPUs by time-slicing" in s for s in sharing)


def test_partner_ending_does_not_restart_the_job_that_stays(one_gpu: LiveService) -> None:
    svc = one_gpu
    long = _submit(svc, "long", "sleep 5")
    short = _submit(svc, "short", "sleep 1")
    _all_end(svc, long, short)
    for j in (long, short):
        rec = svc.store.get(j)
        assert rec is not None and rec.state.value == "succeeded" and rec.runs == 1
    assert _overlap(svc, long, short)
    stayer = long if _kinds(svc, long, "sharing") and any(
        "to itself again" in s for s in _kinds(svc, long, "sharing")) else None
    assert stayer == long, svc.store.events(long)
    assert not [e for e in svc.store.events(long) if e.kind == "stop-requested"]


def test_exclusive_job_never_shares(one_gpu: LiveService) -> None:
    svc = one_gpu
    a = _submit(svc, "a", extra="exclusive: true\n")
    b = _submit(svc, "b")
    _all_end(svc, a, b)
    assert not _overlap(svc, a, b)
    assert not _kinds(svc, a, "sharing") and not _kinds(svc, b, "sharing")
    rec = svc.store.get(a)
    assert rec is not None and rec.job.spec.exclusive


def test_queue_without_sharing_never_shares(one_gpu: LiveService) -> None:
    svc = one_gpu
    a, b = _submit(svc, "a", queue="team-b"), _submit(svc, "b", queue="team-b")
    _all_end(svc, a, b)
    assert not _overlap(svc, a, b)
    for j in (a, b):
        rec = svc.store.get(j)
        assert rec is not None and rec.job.spec.exclusive and rec.runs == 1


# -- bad input ----------------------------------------------------------------------------------

def test_exclusive_false_on_a_queue_that_does_not_share_is_refused(one_gpu: LiveService) -> None:
    with pytest.raises(SpecError, match="queue 'team-b' does not allow sharing GPUs"):
        _submit(one_gpu, "x", queue="team-b", extra="exclusive: false\n")


def test_exclusive_must_be_a_boolean() -> None:
    with pytest.raises(SpecError, match="exclusive: Input should be a valid boolean"):
        parse_request("name: x\ncommand: 'true'\nexclusive: 'yes'\n")


def test_default_exclusive_follows_the_queue() -> None:
    req = parse_request("name: x\ncommand: 'true'\n")
    assert to_live_job(req, "j1", "q", 0.0).spec.exclusive
    assert not to_live_job(req, "j1", "q", 0.0, queue_shares=True).spec.exclusive
    opted_out = parse_request("name: x\ncommand: 'true'\nexclusive: true\nmemory_gib: 6\n")
    job = to_live_job(opted_out, "j1", "q", 0.0, queue_shares=True)
    assert job.spec.exclusive and job.spec.memory_gib == 6.0 and job.spec.extra == {}
    back = type(job).from_json(job.to_json())
    assert back.spec.exclusive and back.spec.memory_gib == 6.0


def test_queue_sharing_must_be_a_boolean(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_config(state, [{"name": "team-a", "nominal_gpus": 1, "sharing": "often"},
                         {"name": "team-b", "nominal_gpus": 1}])
    with pytest.raises(SpecError, match=r"queue 'team-a': sharing: Input should be a valid bool"):
        load_tenancy(state)
    cfg = yaml.safe_load((state / CONFIG_NAME).read_text())
    cfg["queues"][0]["sharing"] = True
    (state / CONFIG_NAME).write_text(yaml.safe_dump(cfg))
    t = load_tenancy(state)
    assert t.shares("team-a") and not t.shares("team-b")


def test_packing_policy_refused_on_an_executor_that_cannot_share(tmp_path: Path) -> None:
    from tessera.live.server import live_policy
    from tessera.live.store import Store
    from tessera.sched.catalog import gavel_loop_only, make_policy

    live_policy("hetero_pack", "local")
    live_policy("max_min_fairness_packed", "ray")
    assert "cannot run on this executor" in (gavel_loop_only(make_policy("hetero_pack")) or "")

    class OneJobPerGpu:  # an executor without ``shares_gpus``
        name = "plain"
    write_config(tmp_path / "s")
    with pytest.raises(SpecError, match="cannot run on this executor"):
        LiveService(Store(tmp_path / "s" / "state.db"), OneJobPerGpu(),  # type: ignore[arg-type]
                    load_cluster("v100:1", 1), load_tenancy(tmp_path / "s"), "hetero_pack",
                    tmp_path / "w")


# -- the books ----------------------------------------------------------------------------------

def _alloc(job: str, created_s: float, mate: str = "", gpus: int = 1,
           status: str = "running") -> Allocation:
    p = Placement.of(_V100_16GB, (("n0", gpus),),
                  colocated_with=(JobId(mate),) if mate else ())
    return Allocation(job, 1, p, status, None, created_s, created_s, None, None, "")


def test_a_shared_gpu_set_is_counted_once() -> None:
    host, rider, alone = _alloc("h", 1.0, "r"), _alloc("r", 2.0, "h"), _alloc("x", 0.5)
    assert riders([host, rider, alone]) == {("r", 1): ("h", 1)}
    assert [a.job_id for a in counted([rider, host, alone])] == ["h", "x"]
    cluster = load_cluster("v100:4", 4)
    node = cluster.nodes[0].node_id
    mk = [Allocation(a.job_id, 1, Placement.of(_V100_16GB, ((node, 1),),
                                            colocated_with=a.placement.colocated_with),
                     "running", None, a.created_s, a.created_s, None, None, "")
          for a in (host, rider, alone)]
    assert free_gpus(cluster, mk) == {node: 2}
    # Quotas count each job at its full size (the rule in tessera.live.sharing).
    assert queue_usage(mk, {"h": "q", "r": "q", "x": "p"}) == {"q": 2, "p": 1}


def test_a_stale_label_rides_only_while_the_partner_holds_the_same_gpus() -> None:
    # The partner moved away (other node): the stayer's label is stale, both count.
    host = _alloc("h", 1.0, "r")
    moved = Allocation("r", 2, Placement.of(_V100_16GB, (("n1", 1),)), "running", None, 3.0,
                       3.0, None, None, "")
    assert riders([host, moved]) == {}
    # Two gangs of different sizes never ride on each other.
    assert riders([_alloc("h", 1.0, "r", gpus=2), _alloc("r", 2.0, "h")]) == {}


def test_runs_written_at_the_same_instant_ride_by_write_order_not_job_id() -> None:
    """A decision writes a pair's host run before its partner's, both at the same time; the
    simulator makes the job it starts first the host. Job ids must not decide it."""
    host = replace(_alloc("z", 5.0, "a"), seq=7)
    rider = replace(_alloc("a", 5.0, "z"), seq=8)
    assert riders([rider, host]) == {("a", 1): ("z", 1)}
    # ... and when the pair breaks apart on the node, the one written second moves.
    alone = Placement.of(_V100_16GB, (("n0", 1),))
    assert relabels([JobId("a"), JobId("z")], {JobId("a"): alone, JobId("z"): alone},
                    {"a": rider, "z": host}) == ["z"]


def test_relabels_keep_the_stayer_and_move_the_rider_when_a_pair_breaks_apart() -> None:
    h, r = _alloc("h", 1.0, "r"), _alloc("r", 2.0, "h")
    alone = Placement.of(_V100_16GB, (("n0", 1),))
    current = {"h": h, "r": r}
    # The partner left (ended or preempted): the host is relabelled, not restarted.
    assert relabels([JobId("h")], {JobId("h"): alone}, {"h": h}) == ["h"]
    # Both stay on n0 apart: the core gave one other GPUs there; the rider moves.
    both = {JobId("h"): alone, JobId("r"): alone}
    assert relabels([JobId("h"), JobId("r")], both, current) == ["h"]
    # Two jobs that ran apart are paired: one stays, the other moves onto its GPUs.
    a, b = _alloc("a", 1.0), _alloc("b", 2.0)
    pa = Placement.of(_V100_16GB, (("n0", 1),), colocated_with=(JobId("b"),))
    pb = Placement.of(_V100_16GB, (("n0", 1),), colocated_with=(JobId("a"),))
    assert relabels([JobId("a"), JobId("b")], {JobId("a"): pa, JobId("b"): pb},
                    {"a": a, "b": b}) == ["a"]


def test_cluster_view_counts_a_shared_gpu_once(one_gpu: LiveService) -> None:
    svc = one_gpu
    a, b = _submit(svc, "a", "sleep 4"), _submit(svc, "b", "sleep 4")

    def both_run() -> bool:
        return len(svc.store.allocations(("running",))) == 2
    wait_for(both_run, 30, "both runs to run")
    view = cluster_json(svc, ADMIN)
    assert view["nodes"][0]["used_gpus"] == 1
    assert view["flavors"][0]["used_gpus"] == 1
    from tessera.live.visibility import queues_json

    used = {q["name"]: q["used_gpus"] for q in queues_json(svc, ADMIN)["queues"]}
    assert used["team-a"] == 2  # each job at its full size against the quota
    for j in (a, b):
        svc.cancel(j, ADMIN)


# -- the mechanism ------------------------------------------------------------------------------

def test_mechanism_is_mps_only_with_a_running_daemon(tmp_path: Path) -> None:
    bin_dir, pipes = tmp_path / "bin", tmp_path / "mps"
    bin_dir.mkdir()
    pipes.mkdir()
    tool = bin_dir / "nvidia-cuda-mps-control"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    env = {"PATH": str(bin_dir), "CUDA_MPS_PIPE_DIRECTORY": str(pipes)}
    assert mechanism(env).kind == "time-slicing"  # installed, but no daemon's pipe
    (pipes / "control").touch()
    got = mechanism(env)
    assert got.kind == "mps" and dict(got.env()) == {
        "TESSERA_GPU_SHARING": "mps", "CUDA_MPS_PIPE_DIRECTORY": str(pipes)}
    assert mechanism({"PATH": str(tmp_path)}).kind == "time-slicing"  # not installed


def test_partner_ranks_get_the_hosts_devices(tmp_path: Path) -> None:
    from tessera.live.executors.base import LaunchSpec
    from tessera.live.executors.local import LocalExecutor
    from tests.live.helpers import wait_for as wait

    ex = LocalExecutor(tmp_path / "runs", grace_s=1.0)
    p = Placement.of(_V100_16GB, (("n0", 2),))
    ex.launch(LaunchSpec("h", 1, ("sleep", "0.1"), (), p, str(tmp_path / "ck-h")))
    host = json.loads((ex.run_dir("h", 1) / "launch.json").read_text())
    host["ranks"][0]["CUDA_VISIBLE_DEVICES"], host["ranks"][1]["CUDA_VISIBLE_DEVICES"] = "2", "3"
    (ex.run_dir("h", 1) / "launch.json").write_text(json.dumps(host))
    ex.launch(LaunchSpec("r", 1, ("sleep", "0.1"), (("TESSERA_GPU_SHARING", "time-slicing"),),
                         p, str(tmp_path / "ck-r"), share_with=("h", 1)))
    mine = json.loads((ex.run_dir("r", 1) / "launch.json").read_text())["ranks"]
    assert [r["CUDA_VISIBLE_DEVICES"] for r in mine] == ["2", "3"]
    assert mine[0]["TESSERA_GPU_SHARING"] == "time-slicing"
    wait(lambda: ex.status("r", 1).state == "exited", 20, "the partner to exit")
    with pytest.raises(RuntimeError, match="no launch record"):
        ex.launch(LaunchSpec("s", 1, ("true",), (), p, str(tmp_path / "ck-s"),
                             share_with=("nobody", 1)))


def test_gavels_round_mechanism_refused_in_events_mode(tmp_path: Path) -> None:
    """Gavel's packing policies change shares only at round boundaries: the live service
    refuses them in ``mode: events`` in the same words as the simulator, before any state."""
    from tessera.live.server import live_policy
    from tessera.live.store import Store

    events = SchedulerSettings(mode="events")
    with pytest.raises(SpecError, match="run it in rounds mode, not events"):
        live_policy("max_min_fairness_packed", "local", events)
    live_policy("max_min_fairness_packed", "local", SchedulerSettings(mode="rounds"))
    live_policy("hetero_pack", "local", events)  # ours decides on events too
    write_config(tmp_path / "s")
    with pytest.raises(SpecError, match="run it in rounds mode, not events"):
        LiveService(Store(tmp_path / "s" / "state.db"), LocalExecutor(tmp_path / "w" / "runs"),
                    load_cluster("v100:1", 1), load_tenancy(tmp_path / "s"), "fifo_packed",
                    tmp_path / "w", ServiceOptions(scheduler=events))


def test_serve_takes_a_policy_with_options() -> None:
    """``tessera serve -p hetero_pack:min_gain=0.2`` -- and a misspelt option is refused
    before anything starts."""
    from tessera.live.server import live_policy

    live_policy("hetero_pack:min_gain=0.2:short_first=0.1", "local")
    with pytest.raises(SpecError, match="unknown option 'min_gian'"):
        live_policy("hetero_pack:min_gian=0.2", "local")
