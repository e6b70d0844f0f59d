"""CPU-only runs on the Ray executor: their bundles and their ranks' environment (issue 33,
parts 5-6). No Ray cluster is started here; ``tests/live/test_ray_cpu_jobs.py`` runs one.

A CPU-only run (``gpus: 0`` with CPUs) used to get the GPU bundle shape, ``{"GPU": 0,
<flavor mark>: 0, ...}``: a bundle that asks nothing Ray can hold it to, on any node. It now asks
its CPUs (and memory where the job asks memory), no GPU, and -- on a cluster whose nodes offer
``tessera_node:<id>`` marks -- the mark of the node the CPU stage chose.
"""

from __future__ import annotations

import json
import sys

import pytest

from tessera.live.executors.base import CPU_ONLY_FLAVOR, LaunchSpec, rank_envs
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import wait_for_job

pytest.importorskip("ray")

from tessera.live.executors.ray.cluster import unplaceable_reason
from tessera.live.executors.ray.launch import run_bundles
from tessera.live.executors.ray.node_marks import cpu_bundle, offers_node_marks

V100 = resolve_flavor("V100")
TEAM_A = Principal("a", "team-a")


def _cpu_spec(host: tuple[tuple[str, float, float], ...],
              nodes: tuple[str, ...] = ("cpu-0",)) -> LaunchSpec:
    return LaunchSpec("j", 1, ("true",), (), Placement.of(V100, tuple((n, 0) for n in nodes)),
                      "/c", host_by_node=host)


def test_a_cpu_only_bundle_asks_cpus_and_memory_and_no_gpu() -> None:
    (b,) = run_bundles(_cpu_spec((("cpu-0", 4.0, 8.0),)), "accelerator_type",
                       {"cpu-0": "nvA"})
    assert b == {"CPU": 4.0, "memory": 8.0 * 2**30}
    (b,) = run_bundles(_cpu_spec((("cpu-0", 2.0, 0.0),)), "gpu_flavor")
    assert b == {"CPU": 2.0}  # no memory key when the job asks no memory


def test_a_cpu_only_bundle_is_held_to_its_node_where_nodes_are_marked() -> None:
    (b,) = run_bundles(_cpu_spec((("cpu-0", 4.0, 8.0),)), "gpu_flavor", pin_cpu_only=True)
    assert b == {"CPU": 4.0, "memory": 8.0 * 2**30, "tessera_node:cpu-0": 0.001}
    assert offers_node_marks([{"CPU": 2.0}, {"CPU": 2.0, "tessera_node:cpu-0": 1.0}])
    assert not offers_node_marks([{"CPU": 2.0, "GPU": 2.0, "nvlink_domain:nvA": 2.0}])


def test_a_gpu_run_keeps_its_gpu_bundle() -> None:
    spec = LaunchSpec("j", 1, ("true",), (), Placement.of(V100, (("a", 2),)), "/c",
                      host_by_node=(("a", 6.0, 0.0),))
    (b,) = run_bundles(spec, "gpu_flavor", pin_cpu_only=True)
    assert b == {"GPU": 2.0, "gpu_flavor:V100-16GB": 2.0, "CPU": 6.0}


def test_a_cpu_only_bundle_without_cpus_is_refused() -> None:
    with pytest.raises(ValueError, match="holds no CPUs on node cpu-0"):
        run_bundles(_cpu_spec(()), "gpu_flavor")
    with pytest.raises(ValueError, match="needs CPUs > 0"):
        cpu_bundle("cpu-0", 0.0, 1.0, pin=False)


def test_unplaceable_names_cpus_and_memory_of_a_cpu_only_bundle() -> None:
    nodes = [{"CPU": 2.0, "memory": 4.0 * 2**30, "tessera_node:cpu-0": 1.0},
             {"CPU": 16.0, "memory": 64.0 * 2**30, "GPU": 2.0}]
    (big,) = run_bundles(_cpu_spec((("cpu-0", 8.0, 16.0),)), "gpu_flavor", pin_cpu_only=True)
    assert unplaceable_reason([big], nodes) == (
        "no Ray node with tessera_node:cpu-0 has 8 CPUs and 16 GiB of memory for a CPU-only "
        "bundle (the largest has 2 CPUs, 4 GiB)")
    (free,) = run_bundles(_cpu_spec((("cpu-0", 32.0, 0.0),)), "gpu_flavor")
    assert unplaceable_reason([free], nodes) == (
        "no Ray node has 32 CPUs and 0 GiB of memory for a CPU-only bundle (the largest has "
        "16 CPUs, 64 GiB)")
    (gone,) = run_bundles(_cpu_spec((("cpu-9", 1.0, 0.0),), ("cpu-9",)), "gpu_flavor",
                          pin_cpu_only=True)
    why = unplaceable_reason([gone], nodes)
    assert why is not None and why.startswith(
        "no Ray node offers tessera_node:cpu-9 for a CPU-only bundle of 1 CPUs"), why
    (fits,) = run_bundles(_cpu_spec((("cpu-0", 2.0, 4.0),)), "gpu_flavor", pin_cpu_only=True)
    assert unplaceable_reason([fits], nodes) is None


def test_a_cpu_only_rank_claims_no_gpu_flavor() -> None:
    (env,) = rank_envs(_cpu_spec((("cpu-0", 1.0, 0.0),)), "127.0.0.1", 1234)
    assert env["TESSERA_FLAVOR"] == CPU_ONLY_FLAVOR == "cpu"
    assert env["TESSERA_GANG_FLAVORS"] == "cpu" and env["CUDA_VISIBLE_DEVICES"] == ""
    gpu = LaunchSpec("j", 1, ("true",), (), Placement.of(V100, (("a", 1),)), "/c")
    (env,) = rank_envs(gpu, "127.0.0.1", 1234)
    assert env["TESSERA_FLAVOR"] == "V100-16GB"


def test_a_local_cpu_only_run_sees_flavor_cpu(service: LiveService) -> None:
    show = "import os; print('flavor', repr(os.environ.get('TESSERA_FLAVOR')))"
    rec = service.submit(parse_request(json.dumps({
        "name": "etl", "command": [sys.executable, "-S", "-c", show], "gpus": 0,
        "host": {"cpus": 1}}), "json"), TEAM_A)
    jid = rec.job.spec.job_id
    wait_for_job(service, jid)
    chunk = service.executor.read_log(jid, 1, 0, 0, 10_000)
    assert chunk is not None and "flavor 'cpu'" in chunk.text, chunk
