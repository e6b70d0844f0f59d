"""``tessera speeds``: the leave-one-out table, its JSON, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.runner import run_tessera


def test_speeds_json(capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _err = run_tessera(["speeds", "--table", "gavel", "--protocol", "job-type",
                                   "-k", "0", "-k", "1", "--json"], capsys, monkeypatch)
    assert code == 0
    rows = json.loads(out)
    assert {(r["k"], r["flavor"]) for r in rows} == {
        (k, f) for k in (0, 1) for f in ("K80", "P100", "V100-16GB")}
    assert all(r["table"] == "gavel" and r["mape"] > 0 and r["worst"] >= r["mape"]
               for r in rows)
    assert all(r["best_source_mape"] is None for r in rows if r["k"] == 0)


def test_speeds_text_skips_what_the_table_cannot_answer(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_tessera(["speeds", "--table", "gavel", "--protocol", "flavor",
                                  "-k", "1", "-k", "2"], capsys, monkeypatch)
    assert code == 0
    assert "MAPE %" in out and "V100-16GB" in out
    assert "skipped: k=2" in err


def test_speeds_kernels_prior_json(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _err = run_tessera(["speeds", "--table", "gavel", "--protocol", "job-type",
                                   "-k", "1", "--prior", "kernels", "--json"], capsys,
                                  monkeypatch)
    assert code == 0
    rows = json.loads(out)
    assert {r["flavor"] for r in rows} == {"K80", "P100", "V100-16GB"}
    assert all(r["prior"] == "kernels" and r["mape"] > 0 for r in rows)


@pytest.mark.parametrize(("args", "message"), [
    (["--protocol", "row"], "--protocol 'row': one of job-type, flavor"),
    (["--prior", "oracle"], "--prior 'oracle': one of roofline, kernels"),
    (["--prior", "kernels", "--model-known"], "--prior kernels and --model-known do not"),
    (["-k", "-1"], "-k -1: the number of observations is 0 or more"),
    (["--table", "no-such-table"], "no-such-table"),
])
def test_speeds_bad_input_is_one_line(args: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    code, _out, err = run_tessera(["speeds", *args], capsys, monkeypatch)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_simulate_with_learned_speeds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _err = run_tessera(["simulate", "-t", "philly", "--limit", "40", "-p",
                                   "hetero_srpt", "--speeds", "learned", "--json", "--no-plots",
                                   "--out", str(tmp_path)], capsys, monkeypatch)
    assert code == 0
    result = json.loads(out)["results"]["hetero_srpt"]
    assert result["succeeded"] == 40
    assert any(n.startswith("--speeds learned: mean |estimate/true - 1|")
               for n in result["notes"])


def test_simulate_refuses_unknown_speeds(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    code, _out, err = run_tessera(["simulate", "-t", "philly", "--limit", "5", "--speeds",
                                   "guessed"], capsys, monkeypatch)
    assert code == 2
    assert err.strip() == "error: --speeds 'guessed': table or learned"
