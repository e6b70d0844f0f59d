"""load_trace: format detection, known names, skip-mode reporting, registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import SpecError, TraceFormatError
from tessera.workload import READERS, detect_format, list_known_traces, load_trace, read_trace


@pytest.mark.parametrize(
    ("file", "fmt"),
    [
        ("gavel_small.trace", "gavel"),
        ("philly_small.csv", "philly"),
        ("itp_dir", "itp"),
        ("fgd_small.csv", "fgd"),
        ("sia_small.csv", "sia"),
    ],
)
def test_detection(golden: Path, file: str, fmt: str) -> None:
    assert detect_format(golden / file).name == fmt
    assert read_trace(golden / file).format == fmt


def test_every_reader_has_a_summary() -> None:
    assert set(READERS.names()) == {"gavel", "philly", "itp", "fgd", "sia", "synergy"}
    assert all(entry.summary for entry in READERS)


def test_unknown_format_and_name(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(TraceFormatError, match="cannot tell the trace format"):
        load_trace(path)
    with pytest.raises(SpecError, match="did you mean 'philly'"):
        load_trace(path, format="phily")
    with pytest.raises(SpecError, match="no trace file"):
        load_trace("no-such-trace")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(TraceFormatError, match="empty"):
        load_trace(path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(b"timestamp,duration,num_gpus,gpu_time,cluster\n\xff\xfe\x00\n")
    with pytest.raises(TraceFormatError, match="UTF-8"):
        load_trace(path, format="philly")


def test_all_rows_bad_in_skip_mode_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\nx,1,1,1,a\ny,1,1,1,a\n")
    with pytest.raises(TraceFormatError, match="after skipping 2"):
        load_trace(path, on_error="skip")


def test_known_traces_list() -> None:
    rows = {k.name: k for k in list_known_traces()}
    assert rows["philly"].status == "bundled"
    assert rows["philly"].num_rows == len(load_trace("philly"))
    assert {"philly-full", "itp", "fgd", "sia-philly-1"} <= set(rows)


def test_bundled_slice_is_small_and_has_a_notice() -> None:
    from tessera.workload.known import bundled_philly_path

    path = bundled_philly_path()
    assert path.stat().st_size < 1_000_000
    assert (path.parent / "NOTICE.txt").read_text().count("CC-BY-4.0") >= 1
