"""Co-location under the Ray executor, on an embedded Ray cluster that pretends to hold a V100.

Opt-in (``-m ray``): starting Ray costs several seconds on a small machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal, load_tenancy
from tessera.model.cluster import load_cluster
from tessera.sched.core.settings import SchedulerSettings
from tests.live.helpers import wait_for, write_config

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")

from tessera.live.executors.ray.head import EmbeddedHead  # noqa: E402

ADMIN = Principal("admin", None)
QUEUES = [{"name": "team-a", "nominal_gpus": 4, "sharing": True},
          {"name": "team-b", "nominal_gpus": 4}]


def _groups() -> list[str]:
    return [str(g["name"]) for g in ray.util.placement_group_table().values()
            if g["state"] != "REMOVED" and str(g["name"]).startswith("tessera-pg:")]


def test_two_jobs_share_one_gpu_through_one_placement_group(tmp_path: Path) -> None:
    from tessera.live.executors.ray.executor import RayExecutor

    state, work = tmp_path / "state", tmp_path / "state-work"
    write_config(state, QUEUES)
    cluster = load_cluster("v100:1", 1)
    try:
        svc = LiveService(Store(state / "state.db"),
                          RayExecutor(cluster, None, work / "runs", grace_s=1.0, state_dir=state),
                          cluster, load_tenancy(state), "hetero_pack", work,
                          ServiceOptions(period_s=0.5, poll_s=0.1, grace_s=1.0,
                                         scheduler=SchedulerSettings(round_s=1.0)))
        svc.start()
        jobs = {}
        # The short job runs alone first and makes the group; the long one joins its GPU, and
        # outlives it: the group must stay until the long one ends.
        for name, secs in (("short", 5), ("long", 8)):
            out = tmp_path / f"{name}.cvd"
            jobs[name] = svc.submit(parse_request(
                f"name: {name}\nqueue: team-a\nflavors: [V100]\n"
                "job_type: ResNet-18 (batch size 32)\nexpected_duration_s: 3\n"
                f"command: 'echo ${{CUDA_VISIBLE_DEVICES:--}} > {out}; sleep {secs}'"),
                ADMIN).job_id
            if name == "short":
                wait_for(lambda: len(svc.store.allocations(("running",))) == 1, 90,
                         "the short job to run alone")

        def running() -> int:
            return len(svc.store.allocations(("running",)))
        wait_for(lambda: running() == 2, 90, "both jobs to run")
        assert len(_groups()) == 1, _groups()  # the pair's GPU is reserved once in Ray
        assert ray.available_resources().get("GPU", 0.0) == 0.0
        cvd = {n: (tmp_path / f"{n}.cvd") for n in jobs}
        wait_for(lambda: all(p.exists() and p.read_text() for p in cvd.values()), 30,
                 "both jobs to report their devices")
        assert cvd["short"].read_text() == cvd["long"].read_text() != "-\n"
        short, long = jobs["short"], jobs["long"]
        wait_for(lambda: svc.store.get(short).final, 60, "the short job to end")  # type: ignore[union-attr]
        # The long job keeps running on the GPU, which stays reserved whichever job made the
        # group, and is not restarted.
        assert not svc.store.get(long).final  # type: ignore[union-attr]
        assert len(_groups()) == 1 and ray.available_resources().get("GPU", 0.0) == 0.0
        wait_for(lambda: svc.store.get(long).final, 60, "the long job to end")  # type: ignore[union-attr]
        for j in (short, long):
            rec = svc.store.get(j)
            assert rec is not None and rec.state.value == "succeeded" and rec.runs == 1
        events = [e.detail for j in (short, long) for e in svc.store.events(j)
                  if e.kind == "sharing"]
        assert any("by time-slicing" in e and "sharing 1×V100-16GB" in e for e in events)
        assert any("now shares" in e and "keeps running" in e for e in events)  # the host
        wait_for(lambda: not _groups(), 30, "the group to be removed once both ended")
        svc.stop()
    finally:
        EmbeddedHead(state).stop()
