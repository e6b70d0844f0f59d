"""Hostile review of the CPU-only quota additions (issue 33): torn Kueue annotations and what
a tenant's pending reason may say about other queues."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tessera.errors import SpecError
from tessera.live.kueue_read import tenancy_from_kueue
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service
from tests.live.test_kueue_read import base_docs

TEAM_A, TEAM_B = Principal("a", "team-a"), Principal("b", "team-b")
CPU_JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 16}\n"


@pytest.mark.parametrize("torn", [["24"], {"cpus": 24}, True, "nan", "inf", "-4"])
def test_a_torn_cpu_only_annotation_is_one_line_naming_the_key(torn: Any) -> None:
    """A list or a mapping raised TypeError (a traceback), ``true`` was read as 1 CPU, and
    nan/inf/-4 were refused without naming the annotation."""
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = {"tessera.io/cpu-only-cpus": torn}
    with pytest.raises(SpecError, match=r"metadata\.annotations\.tessera\.io/cpu-only-cpus: "
                                        r"not a number of CPUs \(>= 0\)") as e:
        tenancy_from_kueue([("t.yaml", d) for d in docs])
    assert "\n" not in str(e.value)


def test_a_plain_yaml_number_annotation_still_reads() -> None:
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = {"tessera.io/cpu-only-memory-gib": 64}
    q = tenancy_from_kueue([("t.yaml", d) for d in docs]).tree.queues[cq["metadata"]["name"]]
    assert q.nominal_mem_gib == 64.0


def _held_for_cpus(tmp_path: Path, see_all: bool) -> str:
    """Team-a's guaranteed CPU-only jobs (a cpus quota) take every CPU of both servers; team-b's
    1-GPU job waits for CPUs. Its stored reason, as a tenant of team-b reads it."""
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       start=False, queues=[
                           {"name": "team-a", "nominal_gpus": 4, "cpus": 32},
                           {"name": "team-b", "nominal_gpus": 4}])
    svc.tenancy = replace(svc.tenancy, tenants_see_all=see_all)
    for _ in range(2):
        svc.submit(parse_request(CPU_JOB), TEAM_A)
    svc.round(10.0)
    gid = svc.submit(parse_request("name: g\nqueue: team-b\ncommand: 'sleep 1'\ngpus: 1\n"),
                     TEAM_B).job_id
    svc.round(20.0)
    rec = svc.store.get(gid)
    assert rec is not None and rec.state.value == "pending"
    return rec.reason


def test_a_tenants_host_reason_names_no_other_queues_use(tmp_path: Path) -> None:
    """Without ``tenants_see_all`` a tenant may not read another queue's use; the reason said
    "CPU-only jobs hold CPUs: 'team-a' 32" to team-b (and to ``explain``)."""
    reason = _held_for_cpus(tmp_path, see_all=False)
    assert "team-a" not in reason and "32" not in reason
    assert reason.endswith("(GPUs are free, CPUs are not); CPU-only jobs of other queues hold "
                           "some too")


def test_with_tenants_see_all_the_host_reason_names_every_queue(tmp_path: Path) -> None:
    assert _held_for_cpus(tmp_path, see_all=True).endswith("CPU-only jobs hold CPUs: 'team-a' 32")


def test_tessera_queues_shows_the_cpu_only_quota_and_use(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """``/api/queues`` gained nominal_cpus/used_cpus/...; the ``tessera queues`` table showed
    none of it, so a tenant whose CPU-only job waits 'at its CPU quota' could not see it."""
    import typer
    from typer.testing import CliRunner

    from tessera.cli import live

    rows = [{"name": "team-a", "nominal_gpus": 4, "borrowing_limit_gpus": None, "used_gpus": 0,
             "pending": 1, "running": 1, "nominal_cpus": 12.0, "nominal_memory_gib": None,
             "used_cpus": 8.0, "used_memory_gib": 4.0}]

    class Fake:
        def queues(self) -> list[dict[str, object]]:
            return rows

    monkeypatch.setattr(live, "_client", lambda *a: Fake())
    app = typer.Typer()
    live.register(app)
    out = CliRunner().invoke(app, ["queues"], env={"COLUMNS": "200"}).output
    assert "CPU-only CPUs" in out and "8/12" in out and "4/∞" in out, out
    rows[0].update(nominal_cpus=None, used_cpus=0.0, used_memory_gib=0.0)
    out = CliRunner().invoke(app, ["queues"], env={"COLUMNS": "200"}).output
    assert "CPU-only" not in out  # no host quota and no CPU-only use: the table as before


@pytest.mark.parametrize("field", ["cpus", "memory"])
def test_a_yaml_true_quota_is_refused_not_read_as_one(tmp_path: Path, field: str) -> None:
    """``cpus: true`` (or ``yes``) in tessera-live.yaml was coerced to a quota of 1 CPU (1 GiB)."""
    from tessera.live.tenancy import load_tenancy
    from tests.live.helpers import write_config

    write_config(tmp_path / "s", [{"name": "team-a", "nominal_gpus": 4, field: True},
                                  {"name": "team-b", "nominal_gpus": 4}])
    with pytest.raises(SpecError, match=f"queue 'team-a': {field}: .*got True$"):
        load_tenancy(tmp_path / "s")
