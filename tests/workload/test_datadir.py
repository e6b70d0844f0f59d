"""One data-location rule and one trace-name registry for simulate, lessons and analyze.

The public-data tests here build a tiny data folder from the golden files, so they run without
the real public data and prove which folder was read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tessera.analyze.formats import load_trace as analyze_load
from tessera.errors import SpecError
from tessera.workload import detect_format, load_trace
from tessera.workload.datadir import data_dirs, find_data, missing_data_message
from tessera.workload.known import TRACES, bundled_path, job_trace_labels, list_known_traces

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_data(tmp_path: Path, golden: Path) -> Path:
    """A data folder whose ``philly-full`` is the 5-job golden table."""
    folder = tmp_path / "data"
    target = folder / TRACES["philly-full"].path
    target.parent.mkdir(parents=True)
    shutil.copy(golden / "philly_small.csv", target)
    return folder


def test_tessera_data_dir_is_the_only_folder_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tmp_path))
    assert data_dirs() == (tmp_path.resolve(),)
    assert find_data("traces") is None


def test_default_search_lists_each_folder_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the checkout, <checkout>/../shared/data and ./../shared/data are one folder."""
    monkeypatch.delenv("TESSERA_DATA_DIR", raising=False)
    monkeypatch.delenv("TESSERA_DATA", raising=False)
    monkeypatch.chdir(REPO)
    dirs = data_dirs()
    assert dirs[0] == (REPO.parent / "shared" / "data").resolve()
    assert len(dirs) == len(set(dirs)) == 2
    message = missing_data_message("trace 'x'", "traces/x.csv")
    assert message.count(str(dirs[0])) == 1


def test_setting_tessera_data_dir_serves_simulate_and_analyze_alike(
    tiny_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14: TESSERA_DATA_DIR used to be ignored by `analyze` (it read TESSERA_DATA)."""
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tiny_data))
    assert len(load_trace("philly-full")) == 5
    trace = analyze_load("philly-full")
    assert trace.jobs is not None and trace.jobs.height == 5
    assert trace.paths[0].is_relative_to(tiny_data)


def test_old_variable_still_works_with_a_warning(
    tiny_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TESSERA_DATA_DIR", raising=False)
    monkeypatch.setenv("TESSERA_DATA", str(tiny_data))
    with pytest.warns(FutureWarning, match="TESSERA_DATA is deprecated; set TESSERA_DATA_DIR"):
        trace = analyze_load("philly-full")
    assert trace.jobs is not None and trace.jobs.height == 5


def test_missing_public_data_is_one_message_in_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tmp_path))
    with pytest.raises(SpecError) as sim:
        load_trace("itp-cluster04")
    with pytest.raises(SpecError) as ana:
        analyze_load("itp-cluster04")
    assert str(sim.value) == str(ana.value)
    text = str(sim.value)
    assert "traces/microsoft_itp_elasticflow/raw/cluster04.csv" in text
    assert f"$TESSERA_DATA_DIR = {tmp_path.resolve()}" in text
    assert "set TESSERA_DATA_DIR to the folder that holds traces/" in text


def test_bundled_names_need_no_public_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tmp_path))
    assert len(load_trace("philly")) == 3322
    assert len(load_trace("sia-philly-1")) == 160
    assert analyze_load("philly").format == "philly-slice"
    assert analyze_load("pai-2020").nodes is not None


def test_a_name_means_the_same_file_in_both_commands(
    tiny_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`philly` is the bundled week everywhere; `philly-full` the whole table everywhere."""
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tiny_data))
    for name in ("philly", "philly-full"):
        jobs = analyze_load(name).jobs
        assert jobs is not None and jobs.height == len(load_trace(name))


def test_simulate_refuses_analyze_only_names_with_a_reason() -> None:
    with pytest.raises(SpecError, match=r"'pai-2020' holds no job list to simulate"):
        load_trace("pai-2020")


def test_unknown_name_points_at_the_listing() -> None:
    with pytest.raises(SpecError, match=r"no trace file or folder 'phily'.*`tessera traces`"):
        load_trace("phily")


def test_listing_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_DATA_DIR", str(tmp_path))
    rows = {k.name: k for k in list_known_traces()}
    assert rows["philly"].status == "bundled"
    assert rows["philly-full"].status == "missing" and rows["philly-full"].num_rows is None
    assert rows["helios"].trace.commands == ("analyze",)
    assert "itp-cluster01..10" in job_trace_labels()
    assert len(list_known_traces(expand=True)) == len(TRACES)


def test_simulator_detects_every_bundled_job_trace_by_content() -> None:
    """A bundled file passed as a path (not by name) is read with the reader its name uses."""
    for trace in TRACES.values():
        if trace.bundled and trace.reader is not None:
            assert detect_format(bundled_path(trace.path)).name == trace.reader, trace.name
