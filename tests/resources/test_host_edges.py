"""CPUs and host memory at the edges: job YAML, trace CSV columns, quantities (issue 33).

Every way a user states a host demand -- ``host:`` in a job request, ``cpus``/``memory``
columns of a trace -- reaches ``JobSpec.host`` with the same meaning, and every malformed,
negative or NaN amount is a one-line error naming the field.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tessera.errors import SpecError, TraceFormatError
from tessera.live.spec import parse_request, to_live_job
from tessera.model.quantity import parse_cpus, parse_memory_gib
from tessera.model.resources import HostDemand
from tessera.workload import load_trace


@pytest.mark.parametrize(("raw", "cores"), [(4, 4.0), (1.5, 1.5), ("1500m", 1.5), ("2", 2.0)])
def test_cpu_quantities(raw: object, cores: float) -> None:
    assert parse_cpus(raw) == cores


@pytest.mark.parametrize(("raw", "gib"), [(12, 12.0), ("16Gi", 16.0), ("512Mi", 0.5),
                                         ("1Ti", 1024.0), ("1G", 1e9 / 2**30)])
def test_memory_quantities(raw: object, gib: float) -> None:
    assert math.isclose(parse_memory_gib(raw), gib)


@pytest.mark.parametrize("raw", [-1, float("nan"), float("inf"), "-2", "nan", "4 cores", True,
                                 "16Qi", None])
def test_bad_quantities_are_refused(raw: object) -> None:
    with pytest.raises(SpecError):
        parse_cpus(raw)
    with pytest.raises(SpecError):
        parse_memory_gib(raw)


def _job(host_yaml: str) -> HostDemand | None:
    req = parse_request(f"name: j\ncommand: 'true'\ngpus: 4\n{host_yaml}")
    return to_live_job(req, "j-1", "default", 0.0).spec.host


def test_a_request_carries_its_host_demand_per_gpu_or_per_job() -> None:
    assert _job("") is None
    assert _job("host: {cpus: 6, memory: 48Gi}\n") == HostDemand(6.0, 48.0, True)
    assert _job("host: {cpus: 1500m, memory: 512Mi, per: job}\n") == HostDemand(1.5, 0.5, False)


@pytest.mark.parametrize("host", [
    "{cpus: -1}", "{cpus: .nan}", "{memory: .inf}", "{memory: 16Qi}", "{cpus: 4, per: node}",
    "{cpu_ids: [0, 1]}", "{cpus: 4, cpuset: '0-63'}", "[4, 16]",
])
def test_bad_host_demands_are_refused_at_submission(host: str) -> None:
    """Negative, NaN, unknown units -- and any attempt to name CPU ids: a tenant states
    amounts, never which cores it runs on."""
    with pytest.raises(SpecError, match=r"invalid job request: host"):
        _job(f"host: {host}\n")


HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"


def test_trace_columns_give_host_demands(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},cpus,memory,host_per\n"
                    "2017-10-09 07:01:55,60,2,120,vc,3,24Gi,\n"
                    "2017-10-09 07:01:56,60,2,120,vc,8,64,job\n"
                    "2017-10-09 07:01:57,60,2,120,vc,,,\n")
    jobs = load_trace(path, format="philly").jobs
    assert [j.host for j in jobs] == [HostDemand(3.0, 24.0, True), HostDemand(8.0, 64.0, False),
                                      None]


@pytest.mark.parametrize(("cells", "field"), [("-3,24Gi,", "cpus"), ("nan,1,", "cpus"),
                                              ("3,lots,", "memory"), ("3,1,node", "host_per")])
def test_bad_trace_host_columns_name_the_field(tmp_path: Path, cells: str, field: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},cpus,memory,host_per\n2017-10-09 07:01:55,60,2,120,vc,{cells}\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, format="philly")
    assert (info.value.line, info.value.field) == (2, field)
