"""The 50-job SIGKILL workload of ``test_durability.py`` on the Ray executor: 0 lost, 0 twice.

Embedded: ``tessera serve --executor ray`` starts its own ``ray start --head`` process, which
outlives each killed service; every restart re-attaches and adopts the runs on the detached
rank hosts.
External: the same against a head this test starts, through ``--ray-address`` (token auth on).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.live.executors.ray.head import EmbeddedHead
from tests.live.ray_nodes import RayNodes
from tests.live.test_durability import run_workload

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("ray")

FINISH_S = 420.0  # generous: the machine is small and shared
UP_S = 150.0


def test_sigkill_with_embedded_ray_runs_every_job_exactly_once(tmp_path: Path) -> None:
    try:
        run_workload(tmp_path, ("--executor", "ray"), FINISH_S, UP_S)
    finally:
        EmbeddedHead(tmp_path / "state").stop()


def test_sigkill_with_an_external_ray_runs_every_job_exactly_once(tmp_path: Path) -> None:
    nodes = RayNodes()
    try:
        nodes.add_head(8, {"accelerator_type:V100": 1.0, "accelerator_type:T4": 1.0})
        run_workload(tmp_path, ("--executor", "ray", "--ray-address", nodes.address,
                                "--ray-token-file", str(nodes.token_file)), FINISH_S, UP_S)
    finally:
        nodes.stop()
