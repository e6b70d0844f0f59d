"""Review of stop 42's new flags: bad input at the edges is a one-line error naming the
value, never a traceback, a hang or a flag silently ignored.

Each test failed on the code before the review (``a512321``): a binary ``--carbon`` file or
``--table`` file ended in a ``UnicodeDecodeError`` traceback, carbon times that mix UTC
offsets in a ``TypeError``; a ``--power-budget-kw`` under the cluster's idle draw ran and
finished no job without a word; ``--bootstrap-s 1e30`` never ended and ``--measurement-noise
1000`` overflowed; ``--power-capping`` and ``--carbon-price`` without the flag they shape were
ignored; ``speeds --prior kernels`` on a table of uncounted job types printed an empty table
(rc 0) and the same "skipped" line once per protocol and k.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.cli.simulate import _check_learned_flags
from tessera.errors import SpecError
from tessera.perf.tables import load_throughputs
from tessera.workload.carbon import parse_carbon
from tests.cli.runner import run_tessera


def _trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "g.trace"
    code, _out, _err = run_tessera(["traces", "generate", "--out", str(path), "--jobs", "5",
                                    "--jobs-per-hour", "20", "--seed", "0"], capsys,
                                   monkeypatch)
    assert code == 0
    return str(path)


def _last_error(args: list[str], capsys: pytest.CaptureFixture[str],
                monkeypatch: pytest.MonkeyPatch) -> str:
    code, _out, err = run_tessera(args, capsys, monkeypatch)
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and "Traceback" not in err
    return last


def test_a_binary_carbon_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "ci.csv"
    path.write_bytes(b"time,ci\n\xff\xfe\x00")
    with pytest.raises(SpecError, match=r"carbon trace ci.csv: not a UTF-8 text file \(byte 8"):
        parse_carbon(path, "ci.csv")


def test_carbon_times_with_and_without_a_utc_offset_are_a_one_line_error(
        tmp_path: Path) -> None:
    path = tmp_path / "ci.csv"
    path.write_text("time,ci\n2020-01-01T00:00+00:00,100\n2020-01-01T00:30,90\n")
    with pytest.raises(SpecError, match=r"ci.csv line 3: time '2020-01-01T00:30' and the "
                                        r"first time .* differ in having a UTC offset"):
        parse_carbon(path, "ci.csv")


def test_a_table_that_is_not_gavel_json_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, body in (("bin.json", b"\x00\xff"), ("t.csv", b"job,v100\nx,1\n"),
                       ("list.json", b"[1, 2]")):
        (tmp_path / name).write_bytes(body)
        with pytest.raises(SpecError, match=f"throughputs '.*{name}': not a Gavel "
                                            "throughputs JSON"):
            load_throughputs(tmp_path / name)
    last = _last_error(["speeds", "--prior", "kernels", "--table", str(tmp_path / "bin.json")],
                       capsys, monkeypatch)
    assert "not a Gavel throughputs JSON" in last


def test_a_power_budget_under_the_idle_draw_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path, capsys, monkeypatch)
    last = _last_error(["simulate", "-t", trace, "-c", "v100:2", "-p", "fifo", "--no-plots",
                        "--out", str(tmp_path / "o"), "--power-budget-kw", "0.01"],
                       capsys, monkeypatch)
    assert last.startswith("error: --power-budget-kw 0.01 is not above the cluster's idle "
                           "draw, ") and last.endswith("kW for 2 GPUs: no job could ever run")


@pytest.mark.parametrize(("flags", "message"), [
    (["--power-capping", "uniform"], "--power-capping uniform needs --power-budget-kw"),
    (["--carbon-price", "5"], "--carbon-price 5 needs --carbon-shift ours"),
])
def test_a_flag_without_the_one_it_shapes_is_refused(
        flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path, capsys, monkeypatch)
    last = _last_error(["simulate", "-t", trace, "-c", "v100:2", "-p", "fifo", "--no-plots",
                        "--out", str(tmp_path / "o"), *flags], capsys, monkeypatch)
    assert message in last


def test_absurd_bootstrap_and_noise_are_refused_before_the_run() -> None:
    with pytest.raises(SpecError, match=r"--bootstrap-s must be at most 86400 seconds .* "
                                        r"got 1e\+30"):
        _check_learned_flags("learned", 1e30, 0.0)
    with pytest.raises(SpecError, match=r"--measurement-noise must be at most 10 .* got 1000"):
        _check_learned_flags("learned", None, 1000.0)
    _check_learned_flags("learned", 86_400.0, 10.0)  # the limits themselves are allowed


def test_kernels_prior_on_a_table_of_uncounted_job_types_is_one_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"v100": {"('MyNet (batch size 16)', 1)": {"null": 10.0}},
             "k80": {"('MyNet (batch size 16)', 1)": {"null": 2.0}}}
    path = tmp_path / "my.json"
    path.write_text(json.dumps(table))
    code, out, err = run_tessera(["speeds", "--table", str(path), "--prior", "kernels"],
                                 capsys, monkeypatch)
    assert code == 2 and "table" not in out  # (was: rc 0, an empty table, a line per k)
    assert err.strip().splitlines() == [
        f"error: --prior kernels, table '{path}': no counted work for job type 'MyNet (batch "
        "size 16)': the kernels prior knows Gavel's and Sia's job types only; "
        "tools/count_job_work.py counts new ones"]


def test_zeus_flags_are_checked_before_the_run() -> None:
    """``--zeus-eta 2`` was refused only mid-run, by a message that did not name the flag;
    ``--energy-slack`` without ``--energy-types`` was silently ignored."""
    from tessera.cli.simulate import _check_zeus_flags

    with pytest.raises(SpecError, match=r"--zeus-eta must be in \[0, 1\] .* got 2"):
        _check_zeus_flags(2.0, False, 0.5)
    with pytest.raises(SpecError, match=r"--zeus-eta must be in \[0, 1\] .* got nan"):
        _check_zeus_flags(float("nan"), False, 0.5)
    with pytest.raises(SpecError, match=r"--energy-slack must be >= 0 .* got -1"):
        _check_zeus_flags(0.5, True, -1.0)
    with pytest.raises(SpecError, match=r"--energy-slack 0.2 needs --energy-types"):
        _check_zeus_flags(0.5, False, 0.2)
    _check_zeus_flags(0.0, True, 0.0)
    _check_zeus_flags(1.0, False, 0.5)
    _check_zeus_flags(None, False, 0.5)
