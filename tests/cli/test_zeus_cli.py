"""``tessera zeus``: Zeus's optimiser on its traces -- table, JSON, one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.cli.runner import run_tessera


def test_zeus_json_matches_the_exhaustive_minimum(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_tessera(["zeus", "--gpu", "V100-16GB", "-w", "imagenet", "-w",
                                "librispeech", "--eta", "0.5", "--seed", "1", "--json"],
                               capsys, monkeypatch)
    assert code == 0
    rows = {r["workload"]: r for r in json.loads(out)}
    assert set(rows) == {"imagenet/resnet50", "librispeech/deepspeech2"}
    lib = rows["librispeech/deepspeech2"]
    assert lib["default"]["batch_size"] == 192 and lib["default"]["power_limit_w"] == 250
    assert (lib["exhaustive"]["batch_size"], lib["exhaustive"]["power_limit_w"]) == (48, 150)
    assert lib["zeus"] == lib["exhaustive"] and lib["recurrences"] == 210
    assert 0.25 < lib["saving_vs_default"] < 0.35


def test_zeus_table(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_tessera(["zeus", "--gpu", "a40", "-w", "ncf", "--recurrences", "20"],
                               capsys, monkeypatch)
    assert code == 0
    assert "cost = eta*E + (1-eta)*max_power*T" in out and "movielens-1m/ncf" in out
    code, out, _ = run_tessera(["zeus", "-w", "sentiment140", "--json"], capsys, monkeypatch)
    assert code == 0
    assert [(r["gpu"], r["max_power_w"]) for r in json.loads(out)] == [
        ("v100", 250), ("a40", 300), ("p100", 250), ("rtx6000", 260)]


@pytest.mark.parametrize(("args", "message"), [
    (["--eta", "1.5"], "eta must be in [0, 1] (the weight on energy), got 1.5"),
    (["--eta", "-0.1"], "got -0.1"),
    (["--gpu", "h100"], "Zeus measured no H100-80GB"),
    (["--gpu", "tpu"], "unknown GPU flavor 'tpu'"),
    (["-w", "gpt"], "unknown Zeus workload 'gpt'"),
    (["--beta", "0.5"], "must be >= 1, got 0.5"),
])
def test_zeus_bad_input_is_one_line(args: list[str], message: str,
                                    capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, _out, err = run_tessera(["zeus", *args], capsys, monkeypatch)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
