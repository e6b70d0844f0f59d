"""Review5, item 3: what a local run of a fractional CPU ask gets, and what it is charged.

The decision core books a job's ``host`` CPUs exactly (a ``500m`` CPU-only job is charged 0.5
to its node and its queue's ``cpus:`` quota); the local executor pins the run on
``ceil(cpus)`` whole CPU ids with a cpuset (or affinity) and writes no ``cpu.max``: a ``500m``
job may use its whole CPU -- Kubernetes' request (charged) and limit (what it may use) -- and
never more than the rounding up (``docs/live.md``). These tests pin that down; they found no
defect (no code changed)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from tessera.live.executors import host_limits
from tessera.live.executors.local.executor import LocalExecutor
from tests.live.test_host_live import _launch


def test_a_fractional_cpu_ask_is_pinned_on_its_ceiling_and_never_more() -> None:
    allowed = list(range(16))
    for cpus in (0.001, 0.5, 1.0, 1.5, 2.25, 3.999, 4.0):
        for ranks in (1, 2, 3):
            ids = host_limits.choose_cpus(cpus, allowed, set())
            assert len(ids) == math.ceil(cpus) < cpus + 1, (cpus, ids)
            limits = host_limits.rank_limits(ids, 1.0, ranks, "affinity", None)
            assert {c for lim in limits for c in lim["cpus"]} == set(ids)  # ranks stay inside


def test_two_half_cpu_runs_take_separate_cpus_while_some_are_free_and_share_when_none_is(
        ) -> None:
    assert host_limits.choose_cpus(0.5, [0, 1, 2], {0}) == [1]
    assert host_limits.choose_cpus(0.5, [0, 1], {0, 1}) == [0]  # a full machine: shared


def test_the_cgroup_holds_the_cpuset_and_memory_and_writes_no_cpu_max(tmp_path: Path) -> None:
    rank = tmp_path / "tessera" / "j-1-1-0"
    lim = {"cgroup": str(rank), "cpus": [3], "mem_bytes": 1 << 29, "how": "cgroup"}
    host_limits.enter_cgroup(lim)  # (a plain directory: the writes land as files)
    assert (rank / "cpuset.cpus").read_text() == "3"
    assert (rank / "memory.max").read_text() == str(1 << 29)
    assert not (rank / "cpu.max").exists()  # a whole CPU id; no CFS quota of 0.5


def test_a_half_cpu_local_run_reads_back_one_whole_cpu_and_its_note_says_half(
        tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path / "runs", grace_s=1.0)
    out = _launch(ex, "half", tmp_path, (("n0", 0.5, 0.5),))
    line = next(ln for ln in out.splitlines() if ln.startswith("affinity"))
    got = line.split("affinity", 1)[1].split("as")[0].strip().strip("[]").split(",")
    assert len(got) == 1 and int(got[0]) in os.sched_getaffinity(0), out
    note = ex.host_enforcement("half", 1)
    assert note is not None and note.startswith("host: 0.5 CPUs on CPU ids "), note
