"""Gavel's 10-column TSV: read exactly, reject what Gavel would mis-read, write it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import SpecError, TraceFormatError
from tessera.workload import generate_gavel_like, load_trace, read_trace, write_gavel_tsv

GOOD = (
    "ResNet-50 (batch size 64)\tcmd\timagenet\t-n\t1\t2000\t1\t1\t-1.000000\t{t}\n"
)


def test_golden_trace_fields(golden: Path) -> None:
    wl = load_trace(golden / "gavel_small.trace")
    assert [j.job_id for j in wl.jobs] == ["0", "1", "2", "3"]
    first = wl.jobs[0]
    assert first.job_type == "Transformer (batch size 128)"
    assert (first.num_gpus, first.total_steps, first.submit_time_s) == (2, 346.0, 0.0)
    assert first.slo_factor is None and first.priority_weight == 1.0
    assert first.extra["working_directory"] == "translation"
    assert wl.jobs[1].priority_weight == 5.0
    assert wl.jobs[2].slo_factor == pytest.approx(1.2)
    assert wl.jobs[2].submit_time_s == 30.5
    # duration hint = steps / V100 throughput
    assert wl.jobs[0].duration_hint_s == pytest.approx(346 / 10.069, rel=1e-3)


def test_round_trip_is_field_for_field(golden: Path, tmp_path: Path) -> None:
    src = golden / "gavel_small.trace"
    out = write_gavel_tsv(load_trace(src), tmp_path / "copy.trace")
    original = [line.split("\t") for line in src.read_text().splitlines()]
    copy = [line.split("\t") for line in out.read_text().splitlines()]
    assert copy == original


def test_synthetic_round_trip(tmp_path: Path) -> None:
    wl = generate_gavel_like(200, jobs_per_hour=30, seed=7, multi_priority=True)
    back = load_trace(write_gavel_tsv(wl, tmp_path / "s.trace"))
    assert len(back) == len(wl)
    for a, b in zip(wl.jobs, back.jobs, strict=True):
        assert (a.job_id, a.job_type, a.num_gpus, a.priority_weight) == (
            b.job_id, b.job_type, b.num_gpus, b.priority_weight,
        )
        assert a.total_steps == b.total_steps
        assert a.submit_time_s == b.submit_time_s  # written exactly


BAD_LINES = [
    ("decreasing arrival", GOOD.format(t=10) + GOOD.format(t=5), 2, "arrival_time"),
    ("negative arrival", GOOD.format(t=-1), 1, "arrival_time"),
    ("unknown job type", GOOD.format(t=0).replace("ResNet-50 (batch size 64)", "ResNet-51"),
     1, "job_type"),
    ("float steps", GOOD.format(t=0).replace("\t2000\t", "\t20.5\t"), 1, "total_steps"),
    ("zero scale factor", GOOD.format(t=0).replace("\t1\t1\t-1", "\t0\t1\t-1"), 1,
     "scale_factor"),
    ("wrong type priority", GOOD.format(t=0).replace("\t1\t-1.0", "\thigh\t-1.0"), 1,
     "priority_weight"),
    ("truncated line", GOOD.format(t=0) + "LM (batch size 20)\tcmd\tlm", 2, "num_steps_arg"),
    ("blank line inside", GOOD.format(t=0) + "\n" + GOOD.format(t=1), 2, None),
]


@pytest.mark.parametrize(
    ("text", "line", "field"), [b[1:] for b in BAD_LINES], ids=[b[0] for b in BAD_LINES]
)
def test_bad_input_names_line_and_field(
    tmp_path: Path, text: str, line: int, field: str | None
) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), line, field)
    assert str(path) in str(info.value)


def test_skip_mode_reports_every_row(tmp_path: Path) -> None:
    path = tmp_path / "mixed.trace"
    path.write_text(
        GOOD.format(t=0) + GOOD.format(t=0).replace("\t2000\t", "\tx\t") + GOOD.format(t=3)
        + GOOD.format(t=1)
    )
    loaded = read_trace(path, on_error="skip")
    assert len(loaded.workload) == 2
    assert loaded.workload.skipped_rows == 2
    assert [(s.line, s.field) for s in loaded.skipped] == [
        (2, "total_steps"), (4, "arrival_time"),
    ]
    assert any("skipped 2" in n for n in loaded.workload.notes)


def test_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "empty.trace"
    path.write_text("")
    with pytest.raises(TraceFormatError, match="empty"):
        load_trace(path)


def test_writer_strict_refuses_unprofiled_gang(tmp_path: Path) -> None:
    wl = load_trace("philly", limit=3000)
    with pytest.raises(SpecError, match="no profile"):
        write_gavel_tsv(wl, tmp_path / "p.trace")
    out = write_gavel_tsv(wl, tmp_path / "p.trace", strict=False)
    back = load_trace(out)
    assert len(back) == len(wl)
    assert any("never profiled" in n for n in back.notes)
