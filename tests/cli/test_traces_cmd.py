"""``tessera traces`` (the shared name registry) and ``tessera traces generate``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.workload import detect_format, load_trace


def _run(*args: str, data_dir: Path | None = None) -> tuple[int, str]:
    env = {"TESSERA_DATA_DIR": str(data_dir)} if data_dir is not None else None
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_listing_without_public_data_says_missing_and_where_it_looked(tmp_path: Path) -> None:
    code, out = _run("traces", data_dir=tmp_path)
    assert code == 0, out
    assert "None" not in out  # an absent trace used to print "None" as its location
    assert "missing" in out and "bundled" in out
    assert "$TESSERA_DATA_DIR = " + str(tmp_path.resolve()) in out.replace("\n", "")
    for name in ("philly", "philly-full", "sia-philly-1", "pai-2020", "helios"):
        assert f" {name} " in out


def test_generate_writes_a_gavel_trace_that_simulate_reads(tmp_path: Path) -> None:
    out = tmp_path / "my_gavel.trace"
    code, text = _run("traces", "generate", "--out", str(out), "--jobs", "25",
                      "--jobs-per-hour", "30", "--seed", "7")
    assert code == 0, text
    assert "wrote 25 jobs" in text
    assert detect_format(out).name == "gavel"
    wl = load_trace(out)
    assert len(wl) == 25 and wl.jobs[0].submit_time_s == 0.0
    first = out.read_bytes()
    _run("traces", "generate", "--out", str(out), "--jobs", "25", "--jobs-per-hour", "30",
         "--seed", "7")
    assert out.read_bytes() == first  # same seed, same file


def test_generate_single_gpu(tmp_path: Path) -> None:
    out = tmp_path / "one.trace"
    code, text = _run("traces", "generate", "--out", str(out), "--jobs", "40", "--single-gpu")
    assert code == 0, text
    assert {j.num_gpus for j in load_trace(out).jobs} == {1}


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--jobs", "0"], "--jobs"),
     (["--jobs-per-hour", "0"], "must be > 0"),
     (["--out", "/no/such/folder/x.trace"], "does not exist")],
    ids=["no-jobs", "zero-rate", "missing-folder"],
)
def test_generate_rejects_bad_values_with_a_usage_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    full = ["traces", "generate", "--out", str(tmp_path / "x.trace"), *args]
    code, text = _run(*full)
    assert code == 2
    assert message in text
    assert not (tmp_path / "x.trace").exists()
