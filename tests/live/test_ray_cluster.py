"""Flavor resources, placement diagnosis and connecting to Ray -- without a Ray cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.errors import SpecError
from tessera.live.executors.base import free_port
from tessera.live.executors.ray.cluster import (
    flavor_resource,
    pretend_resources,
    probe,
    ray_accelerator_type,
    shared_accelerator_types,
    unplaceable_reason,
)
from tessera.model.cluster import load_cluster
from tessera.model.gpus import CATALOG, resolve_flavor

# What nvidia-smi prints for each catalog GPU (the product names Ray's detection reads).
PRODUCT_NAMES = {
    "K80": "Tesla K80", "P100": "Tesla P100-PCIE-16GB", "P40": "Tesla P40",
    "V100-16GB": "Tesla V100-SXM2-16GB", "V100-32GB": "Tesla V100-SXM2-32GB", "T4": "Tesla T4",
    "RTX-2080Ti": "NVIDIA GeForce RTX 2080 Ti", "RTX-6000": "Quadro RTX 6000",
    "A10": "NVIDIA A10", "L4": "NVIDIA L4", "L40S": "NVIDIA L40S",
    "A100-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-80GB": "NVIDIA A100-SXM4-80GB", "H100-80GB": "NVIDIA H100 80GB HBM3",
    "H200-141GB": "NVIDIA H200",
}


def test_accelerator_types_are_what_ray_detects_on_each_catalog_gpu() -> None:
    nvidia = pytest.importorskip("ray._private.accelerators.nvidia_gpu")
    detect = nvidia.NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type
    assert {f.short for f in CATALOG} == set(PRODUCT_NAMES)
    for f in CATALOG:
        assert ray_accelerator_type(f) == detect(PRODUCT_NAMES[f.short]), f.short
    assert ray_accelerator_type(resolve_flavor("v100")) == "V100"
    assert ray_accelerator_type(resolve_flavor("a100")) == "A100"
    assert ray_accelerator_type(resolve_flavor("l4")) == "L4"
    assert ray_accelerator_type(resolve_flavor("l40s")) == "L40S"


def test_each_rank_asks_a_share_of_the_type_or_one_custom_flavor_unit() -> None:
    assert flavor_resource(resolve_flavor("V100-16GB"), "accelerator_type") == (
        "accelerator_type:V100", 0.001)
    assert flavor_resource(resolve_flavor("T4"), "gpu_flavor") == ("gpu_flavor:T4", 1.0)
    cluster = load_cluster("v100:2,t4:2", 2)
    assert pretend_resources(cluster, "accelerator_type") == {
        "accelerator_type:V100": 1.0, "accelerator_type:T4": 1.0}
    assert pretend_resources(cluster, "gpu_flavor") == {
        "gpu_flavor:V100-16GB": 2.0, "gpu_flavor:T4": 2.0}
    assert shared_accelerator_types(load_cluster("v100:2,v100-32gb:2", 2)) == [
        "V100 (V100-16GB, V100-32GB)"]


def test_unplaceable_names_the_missing_resource_or_the_short_node() -> None:
    nodes = [{"GPU": 2.0, "accelerator_type:V100": 1.0}, {"GPU": 4.0, "accelerator_type:T4": 1.0}]
    fits = [{"GPU": 2.0, "accelerator_type:V100": 0.002}]
    assert unplaceable_reason(fits, nodes) is None
    a100 = [{"GPU": 2.0, "accelerator_type:A100": 0.002}]
    assert unplaceable_reason(a100, nodes) == \
        "no Ray node offers accelerator_type:A100 (2 GPUs in one bundle)"
    wide = [{"GPU": 3.0, "accelerator_type:V100": 0.003}]
    assert unplaceable_reason(wide, nodes) == ("no Ray node with accelerator_type:V100 has 3 "
                                               "GPUs for one bundle (the largest has 2)")


def test_probe_fails_in_one_line_when_nothing_listens() -> None:
    with pytest.raises(SpecError, match=r"cannot connect to Ray at 127\.0\.0\.1:\d+: .*"
                                        r"is `ray start --head` running there\?"):
        probe(f"127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(SpecError, match="is not HOST:PORT"):
        probe("localhost")


def test_serve_with_an_unreachable_ray_exits_2_before_writing_state(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    state = tmp_path / "state"
    r = CliRunner().invoke(app, ["serve", "--state", str(state), "--executor", "ray",
                                 "--ray-address", f"127.0.0.1:{free_port()}"])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot connect to Ray at 127.0.0.1:")
    assert not state.exists()


def test_a_silent_embedded_head_with_live_processes_is_never_stopped(tmp_path: Path) -> None:
    """A remembered head that does not answer but still has processes (a loaded machine, not a
    dead head) must not be replaced: replacing it would kill every run on it."""
    import json
    import subprocess
    import sys

    from tessera.live.executors.ray.head import EmbeddedHead

    head = EmbeddedHead(tmp_path)
    head.record.write_text(json.dumps({"address": f"127.0.0.1:{free_port()}",
                                       "temp_dir": str(head.temp_dir)}))
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                 str(head.temp_dir)])
    try:
        with pytest.raises(SpecError, match="runs but does not answer"):
            head.ensure(1, 1, {})
        assert stand_in.poll() is None and head.record.exists()
    finally:
        stand_in.kill()
        stand_in.wait()


def test_a_head_is_never_started_without_its_record(tmp_path: Path) -> None:
    """The record is written before ``ray start``: where it cannot be written (here, a state
    dir that does not exist), no head is started, so none is left running unfound."""
    from tessera.live.executors.ray.head import EmbeddedHead, cluster_pids

    head = EmbeddedHead(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        head.ensure(1, 1, {"accelerator_type:V100": 1.0})
    assert cluster_pids(str(head.temp_dir)) == []
    assert not head.record.exists()


@pytest.mark.parametrize(("last_line", "starts", "started"), [
    ("Exception: The current node timed out during startup. This could happen ...", 2, True),
    ("ValueError: bad --resources", 1, False),
])
def test_a_head_start_ray_calls_timed_out_is_tried_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last_line: str, starts: int,
    started: bool,
) -> None:
    """Ray's own "timed out during startup" (its raylet or GCS slow on a loaded machine) gets
    one more start on a fresh port; any other failure is reported at once, with Ray's words."""
    import subprocess

    from tessera.live.executors.ray.head import EmbeddedHead

    calls: list[list[str]] = []

    class FakeStart:
        """``ray start`` as ``subprocess.Popen`` sees it: the first one fails."""

        pid = -1  # a session id no process has

        def __init__(self, argv: list[str], stdout: object, **_kw: object) -> None:
            calls.append(argv)
            self.rc = 0
            if len(calls) == 1:
                stdout.write((last_line + "\n").encode())  # type: ignore[attr-defined]
                self.rc = 1

        def wait(self, timeout: float) -> int:
            return self.rc

    monkeypatch.setattr(subprocess, "Popen", FakeStart)
    head = EmbeddedHead(tmp_path)
    if started:
        address = head.ensure(1, 0, {})
        assert address == head.address()
    else:
        with pytest.raises(SpecError, match=r"exit 1.*bad --resources"):
            head.ensure(1, 0, {})
    assert len(calls) == starts
