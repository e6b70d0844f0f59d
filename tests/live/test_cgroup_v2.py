"""The local executor's cgroup v2 path against a directory laid out like a v2 hierarchy, and
the removal of the runs' cgroups (issue 33 part 6).

This project's machines mount cgroup v1 only, so the v2 path is driven here through the
executor's injectable root (``cgroup_root``, ``own_cgroup``): a temporary directory with a
``cgroup.controllers`` and the service's own cgroup directory. What that proves and what it
cannot (the kernel's side) is in ``docs/live.md``, "CPUs and memory of a run".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tessera.live.executors import host_limits
from tessera.live.executors.base import LaunchSpec
from tessera.live.executors.local.executor import LocalExecutor
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import wait_for


def _v2_tree(tmp_path: Path, controllers: str = "cpuset cpu io memory pids") -> tuple[str, str]:
    """A cgroup v2 mount with the service in ``/svc``: ``(root, own cgroup file)``."""
    root = tmp_path / "cgroup"
    (root / "svc").mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    own = tmp_path / "self-cgroup"
    own.write_text("0::/svc\n")
    return str(root), str(own)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-S", "-c", "pass"])
    p.wait()
    return p.pid


def test_a_v2_hierarchy_with_cpuset_and_memory_is_used(tmp_path: Path) -> None:
    root, own = _v2_tree(tmp_path)
    assert host_limits.cgroup_v2_base(root, own) == os.path.join(root, "svc", "tessera")
    assert host_limits.mechanism(root, own) == "cgroup"
    no_mem_root, no_mem_own = _v2_tree(tmp_path / "b", controllers="cpuset cpu io pids")
    assert host_limits.cgroup_v2_base(no_mem_root, no_mem_own) is None
    assert host_limits.mechanism(no_mem_root, no_mem_own) == "affinity"


def test_a_run_gets_its_cgroup_files_and_the_cgroup_goes_when_it_ends(tmp_path: Path) -> None:
    """A real run (runner, guardian, command) on the injected v2 tree: while it runs, its
    rank's cgroup holds the chosen CPU ids (``cpuset.cpus``), its memory (``memory.max``) and
    the guardian's pid (``cgroup.procs``), and the parent enables both controllers; once the
    run is seen exited, the directory is gone."""
    root, own = _v2_tree(tmp_path)
    ex = LocalExecutor(tmp_path / "runs", grace_s=1.0, cgroup_root=root, own_cgroup=own)
    gate = tmp_path / "gate"
    wait_gate = (f"import os, time\nwhile not os.path.exists({str(gate)!r}): "
                 "time.sleep(0.05)")
    spec = LaunchSpec("pinned", 1, (sys.executable, "-S", "-c", wait_gate), (),
                      Placement.of(resolve_flavor("V100"), (("n0", 1),)),
                      str(tmp_path / "ckpt"), grace_s=1.0, host_by_node=(("n0", 1.0, 0.5),))
    ex.launch(spec)
    cg = Path(root) / "svc" / "tessera" / "pinned-1-0"
    wait_for(lambda: (cg / "cgroup.procs").exists() and (cg / "cgroup.procs").read_text().strip()
             != "", 30.0, "the guardian to join its cgroup")
    note = ex.host_enforcement("pinned", 1)
    assert note is not None and "enforced by a cgroup v2 cpuset and memory.max" in note
    cpus = [int(c) for c in (cg / "cpuset.cpus").read_text().split(",")]
    assert len(cpus) == 1 and cpus[0] in os.sched_getaffinity(0)
    assert (cg / "memory.max").read_text() == str(512 << 20)
    guardian = int((cg / "cgroup.procs").read_text())
    assert guardian != os.getpid() and host_limits._alive(guardian)
    assert (cg.parent / "cgroup.subtree_control").read_text() == "+cpuset +memory"
    assert ex.remove_cgroups("pinned", 1) == []  # (running: never touched)
    assert cg.is_dir()
    gate.write_text("go")
    wait_for(lambda: ex.status("pinned", 1).state == "exited", 30.0, "the run to exit")
    assert ex.status("pinned", 1).exit_code == 0
    assert not cg.exists()
    assert (cg.parent).is_dir()  # (the service's own tessera directory stays)


def test_recover_removes_what_a_crash_left_and_keeps_what_is_in_use(tmp_path: Path) -> None:
    """At start the executor removes the rank cgroups of runs that are not running and whose
    processes are gone; a cgroup with a live process, and a directory not named like a rank
    cgroup, stay."""
    root, own = _v2_tree(tmp_path)
    base = Path(root) / "svc" / "tessera"
    left = base / "crashed-3-0"
    busy = base / "busy-2-1"
    other = base / "not-ours"
    for d in (left, busy, other):
        d.mkdir(parents=True)
        (d / "cpuset.cpus").write_text("0")
        (d / "memory.max").write_text("1024")
    (left / "cgroup.procs").write_text(f"{_dead_pid()}\n")
    (busy / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (other / "cgroup.procs").write_text("")
    LocalExecutor(tmp_path / "runs", cgroup_root=root, own_cgroup=own)
    assert not left.exists()
    assert busy.is_dir() and other.is_dir()
    ex = LocalExecutor(tmp_path / "runs", cgroup_root=root, own_cgroup=own)
    (busy / "cgroup.procs").write_text(f"{_dead_pid()}\n")  # (its process ended since)
    assert ex.recover_cgroups() == [str(busy)]


def test_removal_never_leaves_the_services_cgroup(tmp_path: Path) -> None:
    root, _own = _v2_tree(tmp_path)
    base = os.path.join(root, "svc", "tessera")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "f").write_text("x")
    assert not host_limits.remove_cgroup(str(outside), base)
    assert not host_limits.remove_cgroup(os.path.join(base, "a", "b"), base)
    assert outside.is_dir()
