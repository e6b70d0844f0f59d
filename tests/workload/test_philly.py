"""The Philly job table: ids from rows, times from timestamps, VC as queue, sorted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tessera.errors import TraceFormatError
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.workload import load_trace, read_trace

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ROW = "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"


def test_golden_philly(golden: Path) -> None:
    wl = load_trace(golden / "philly_small.csv")
    # sorted by submit time, ties in file order; ids are data-row indices
    assert [j.job_id for j in wl.jobs] == [
        "philly-000001", "philly-000003", "philly-000000", "philly-000002", "philly-000004",
    ]
    assert [j.submit_time_s for j in wl.jobs] == [0.0, 0.0, 2932.0, 6417.0, 86400.0]
    assert [j.queue for j in wl.jobs] == ["6214e9", "b436b2", "11cb48", "6214e9", "11cb48"]
    assert any("sorted by submit time" in n for n in wl.notes)
    table = default_throughputs()
    for job in wl.jobs:
        expected = job.duration_hint_s * table.throughput(job.job_type, resolve_flavor("V100-16GB"),
                                                          job.num_gpus)
        assert job.total_steps == pytest.approx(expected)
        if job.num_gpus > 1:
            assert job.job_type in table.distributable_types()
    # 3 and 16 GPUs were never profiled: extrapolated, and noted
    assert any("extrapolated" in n for n in wl.notes)


def test_job_types_are_deterministic(golden: Path) -> None:
    a = load_trace(golden / "philly_small.csv")
    b = load_trace(golden / "philly_small.csv")
    assert [j.job_type for j in a.jobs] == [j.job_type for j in b.jobs]


def test_bundled_philly_is_a_slice_of_the_full_table() -> None:
    wl = load_trace("philly")
    assert 3000 <= len(wl) <= 4000
    assert all(j.duration_hint_s is not None and j.duration_hint_s >= 60 for j in wl.jobs)
    assert wl.jobs[0].submit_time_s == 0.0
    assert len({j.queue for j in wl.jobs}) > 5


@pytest.mark.slow
def test_full_philly_table(shared: Callable[[str], Path]) -> None:
    path = shared("philly/philly_jobs_pollux.csv")
    wl = load_trace(path)
    assert len(wl) == 82247
    assert len({j.queue for j in wl.jobs}) == 15
    assert max(j.num_gpus for j in wl.jobs) == 128
    # the bundled slice keeps the full table's ids and values
    by_id = {j.job_id: j for j in wl.jobs}
    for j in load_trace("philly", limit=50).jobs:
        full = by_id[j.job_id]
        assert (full.num_gpus, full.duration_hint_s, full.queue, full.job_type) == (
            j.num_gpus, j.duration_hint_s, j.queue, j.job_type,
        )


BAD = [
    ("missing column", "timestamp,duration,num_gpus\n" + "2017-10-09 07:01:55,66.0,1\n", 1,
     "cluster"),
    ("wrong type", HEADER + ROW + "2017-10-09 07:01:55,abc,1,66.0,11cb48\n", 3, "duration"),
    ("bad timestamp", HEADER + "2017-13-09 07:01:55,66.0,1,66.0,11cb48\n", 2, "timestamp"),
    ("zero gpus", HEADER + "2017-10-09 07:01:55,66.0,0,0,11cb48\n", 2, "num_gpus"),
    ("negative duration", HEADER + "2017-10-09 07:01:55,-5,1,-5,11cb48\n", 2, "duration"),
    ("truncated file", HEADER + ROW + "2017-10-09 07:01:55,66.0", 3, "num_gpus"),
    ("duplicate id", "job_id," + HEADER + "a," + ROW + "a," + ROW, 3, "job_id"),
]


@pytest.mark.parametrize(("text", "line", "field"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(tmp_path: Path, text: str, line: int, field: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, format="philly")
    assert (info.value.line, info.value.field) == (line, field)


def test_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text(HEADER)
    with pytest.raises(TraceFormatError, match="empty trace"):
        load_trace(path)


def test_skip_mode_keeps_ids_stable(tmp_path: Path) -> None:
    path = tmp_path / "mixed.csv"
    path.write_text(HEADER + "bad,1,1,1,x\n" + ROW)
    loaded = read_trace(path, on_error="skip")
    assert [j.job_id for j in loaded.workload.jobs] == ["philly-000001"]
    assert [(s.line, s.field) for s in loaded.skipped] == [(2, "timestamp")]


def test_window_and_limit() -> None:
    wl = load_trace("philly", time_window=(86400, 2 * 86400))
    assert all(0 <= j.submit_time_s < 86400 for j in wl.jobs)
    assert len(load_trace("philly", limit=10)) == 10


def test_the_readers_counts_are_not_passed_off_as_the_kept_jobs() -> None:
    """With --limit, the reader's notes ("3322 jobs had no job type") count the whole trace:
    the limit's note comes first and says so."""
    full = load_trace("philly")
    wl = load_trace("philly", limit=10)
    assert wl.notes[0] == (f"limit kept the first 10 of {len(full)} jobs; the notes below "
                           f"count all {len(full)} jobs read")
    assert wl.notes[1:] == full.notes


def test_bundled_slice_rebuilds_exactly(shared: Callable[[str], Path], tmp_path: Path) -> None:
    from tessera.workload.bundle import make_philly_slice
    from tessera.workload.known import bundled_philly_path

    source = shared("philly/philly_jobs_pollux.csv")
    out = tmp_path / "slice.csv"
    make_philly_slice(source, out)
    assert out.read_bytes() == bundled_philly_path().read_bytes()
