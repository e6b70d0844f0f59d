"""Bad input: every failure is a TraceFormatError naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.analyze.formats import detect_format, load_trace
from tessera.errors import SpecError, TesseraError, TraceFormatError

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"
FGD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


CASES = [
    pytest.param(
        "jobs.csv",
        PHILLY_HEADER + "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,29",
        None,
        3,
        "num_gpus",
        "truncated",
        id="truncated last line (Philly)",
    ),
    pytest.param(
        "jobs.csv",
        PHILLY_HEADER + "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
        "2017-10-09 06:13:03,abc,1,66.0,6214e9\n",
        None,
        3,
        "duration",
        "expected a number, got 'abc'",
        id="text in a numeric column (Philly)",
    ),
    pytest.param(
        "jobs.csv",
        PHILLY_HEADER + "2017-10-09 07:01:55,66.0,1.5,66.0,11cb48\n",
        None,
        2,
        "num_gpus",
        "expected an integer",
        id="float where an integer belongs",
    ),
    pytest.param(
        "jobs.csv",
        PHILLY_HEADER + "yesterday,66.0,1,66.0,11cb48\n",
        None,
        2,
        "timestamp",
        "expected a timestamp",
        id="malformed wall-clock timestamp",
    ),
    pytest.param(
        "cluster01.csv",
        ITP_HEADER + "a,100,700,1\nb,200,700,1\n\nc,150,700,2\n",
        None,
        5,
        "submission_time",
        "timestamps out of order",
        id="ITP submissions out of order (line counted past a blank line)",
    ),
    pytest.param(
        "pods.csv",
        FGD_HEADER + "p0,1000,1024,1,500,,LS,Running,10,5,10\n",
        None,
        2,
        "deletion_time",
        "timestamps out of order",
        id="FGD pod deleted before it was scheduled",
    ),
    pytest.param(
        "cluster01.csv",
        ITP_HEADER + "a,100,-5,1\n",
        None,
        2,
        "duration",
        "below the minimum",
        id="negative duration",
    ),
    pytest.param(
        "cluster01.csv",
        "job_id,submission_time,num_gpu\na,1,1\n",
        None,
        1,
        "duration",
        "missing column",
        id="missing column",
    ),
    pytest.param(
        "cluster01.csv", ITP_HEADER, None, 2, None, "no data rows", id="header only"
    ),
    pytest.param(
        "x.trace",
        "ResNet-50 (batch size 64)\tcmd\tdir\t-n\t1\t100\t1\t1\t-1\t10\n"
        "ResNet-50 (batch size 64)\tcmd\tdir\t-n\t1\t100\t1\t1\t-1\t5\n",
        None,
        2,
        "arrival_time",
        "timestamps out of order",
        id="Gavel arrivals out of order (header-less line numbers)",
    ),
    pytest.param(
        "data.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n",
        "itp",
        1,
        "submission_time",
        "missing column",
        id="--format forces a format the file does not have",
    ),
]


@pytest.mark.parametrize(("name", "text", "fmt", "line", "field", "message"), CASES)
def test_bad_input_names_file_line_and_field(
    tmp_path: Path, name: str, text: str, fmt: str | None, line: int, field: str | None,
    message: str,
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, fmt)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert err.field == field
    assert message in err.message
    assert str(path) in str(err) and f":{line}" in str(err)


def test_unknown_format_is_a_clear_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "mystery.csv", "foo,bar\n1,2\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert info.value.line == 1
    assert "unknown trace format" in info.value.message
    assert "philly" in info.value.message and "--format" in info.value.message
    assert isinstance(info.value, TesseraError)


def test_unknown_folder_and_unknown_format_option(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="unknown trace format for this folder"):
        detect_format(tmp_path)
    path = _write(tmp_path, "cluster01.csv", ITP_HEADER + "a,1,700,1\n")
    with pytest.raises(TraceFormatError, match="unknown --format 'csv'"):
        load_trace(path, "csv")


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = _write(tmp_path, "cluster01.csv", "")
    with pytest.raises(TraceFormatError, match="file is empty"):
        load_trace(empty, "itp")
    with pytest.raises(SpecError, match=r"no trace file or folder .*nope\.csv"):
        load_trace(tmp_path / "nope.csv")


def test_fgd_rows_out_of_creation_order_are_sorted_with_a_note(tmp_path: Path) -> None:
    """FGD's resampled pod lists (gpushare100) are unsorted upstream; `simulate` reads them, so
    `analyze` must too (the two share trace names)."""
    path = _write(tmp_path, "openb_pod_list_x.csv", FGD_HEADER
                  + "p0,1000,1024,1,500,,LS,Running,30,50,31\n"
                  + "p1,1000,1024,1,1000,,LS,Running,10,40,12\n")
    trace = load_trace(path)
    assert trace.jobs is not None
    assert trace.jobs["submit_time_s"].to_list() == [10.0, 30.0]
    assert any("not in creation order" in n for n in trace.notes)
