"""Format detection from files and folders, and trace names (the registry shared with simulate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.analyze.formats import FORMATS, detect_format, load_trace
from tessera.workload.known import TRACES, bundled_path, list_known_traces

DETECT = [
    ("philly", "philly"),
    ("philly/philly_jobs_pollux.csv", "philly"),
    ("philly/philly_runtime_alibaba.csv", "philly-runtime"),
    ("philly/philly_job_distribution_gavel.csv", "philly-gavel"),
    ("philly/philly_node_sequence.csv", "philly-nodes"),
    ("microsoft_itp_elasticflow", "itp"),
    ("microsoft_itp_elasticflow/raw", "itp"),
    ("microsoft_itp_elasticflow/raw/cluster05.csv", "itp"),
    ("microsoft_itp_elasticflow/elasticflow_generated", "itp"),
    ("alibaba_gpu_2023", "fgd"),
    ("alibaba_gpu_2023/openb_pod_list_gpuspec33.csv", "fgd"),
    ("alibaba_gpu_2023/openb_pod_list_multigpu50.csv", "fgd"),
    ("alibaba_gpu_2023/openb_node_list_all_node.csv", "fgd"),
    ("alibaba_pai_2020", "pai-2020"),
    ("alibaba_pai_2020/pai_machine_spec.csv", "pai-2020"),
    ("alibaba_spot_gpu_2026/node_info_df.csv", "spot-2026"),
    ("helios", "helios"),
    ("helios/helios_cluster_summary.csv", "helios"),
    ("helios/venus_cluster_gpu_number.csv", "helios"),
    ("sia_workloads", "sia"),
    ("sia_workloads/saturn", "sia"),
    ("sia_workloads/philly/workload-1.csv", "sia"),
]


@pytest.mark.parametrize(("relative", "expected"), DETECT, ids=[d[0] for d in DETECT])
def test_detects_format(traces: Path, relative: str, expected: str) -> None:
    assert detect_format(traces / relative) == expected


@pytest.mark.parametrize("name", [t.name for t in TRACES.values() if t.bundled])
def test_every_bundled_trace_is_detected_and_loads_without_public_data(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Detection recognises each bundled file as the format its name gives it, and the name
    loads with the public data out of reach."""
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tmp_path))
    entry = TRACES[name]
    assert detect_format(bundled_path(entry.path)) == entry.analyze_format
    trace = load_trace(name)
    assert trace.format == entry.analyze_format
    assert any(f is not None and f.height > 0 for f in (trace.jobs, trace.nodes))


@pytest.mark.parametrize("name", [k.name for k in list_known_traces()])
def test_known_names_resolve_and_load(traces: Path, name: str) -> None:
    trace = load_trace(name)
    assert trace.format in FORMATS
    assert trace.paths and all(p.is_file() for p in trace.paths)
    frames = (trace.jobs, trace.nodes, trace.occupancy, trace.summary, trace.capacity)
    assert any(f is not None and f.height > 0 for f in frames)


def test_canonical_job_columns(traces: Path) -> None:
    philly = load_trace("philly-full").jobs
    assert philly is not None
    assert {"submit_time_s", "submit_at", "duration_s", "num_gpus", "gpu_time_s", "tenant"} <= set(
        philly.columns
    )
    fgd = load_trace("fgd").jobs
    assert fgd is not None
    assert {"gpu_milli", "gpu_request", "gpu_type", "status", "qos", "wait_s"} <= set(fgd.columns)
    sharing = fgd.filter((fgd["gpu_request"] > 0) & (fgd["gpu_request"] < 1))
    assert ((sharing["gpu_request"] * 1000).round(6) == sharing["gpu_milli"]).all()
    assert sharing.height == 3_078


def test_gavel_trace_file(tmp_path: Path) -> None:
    line = "ResNet-50 (batch size 64)\tpython3 main.py\tdir\t-n\t1\t{steps}\t{sf}\t1\t-1\t{t}\n"
    path = tmp_path / "small.trace"
    path.write_text(line.format(steps=100, sf=1, t=0) + line.format(steps=50, sf=4, t=30))
    assert detect_format(path) == "gavel"
    trace = load_trace(path)
    assert trace.jobs is not None
    assert trace.jobs["num_gpus"].to_list() == [1, 4]
    assert trace.jobs["submit_time_s"].to_list() == [0.0, 30.0]
