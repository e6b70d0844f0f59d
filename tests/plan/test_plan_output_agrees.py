"""``tessera plan``'s text and ``--json`` tell the same plan, and the plan adds up.

Two checks a reader makes by hand: the samples one step processes equal ``--global-batch``,
and the GPUs the plan uses (plus the ones it drops) equal the GPUs of ``--devices``. A stage's
text line counts GPUs and data-parallel ranks over all pipeline copies, as its device line and
the JSON's ``dp`` and ``devices`` do (the JSON's ``gpus`` is per copy, documented in
``docs/plan.md``); the text once printed per-copy counts next to an all-copies device line,
so "4 copies x 16 micro-batches of 1 x DP 2" seemed to make 128 samples of a batch of 64.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tessera.cli.plan import register

PIPELINE = ("--model", "llama-7b", "--devices", "H100:8,A100:8", "--global-batch", "64")
DATA_PARALLEL = ("--model", "imagenet", "--devices", "A100:2,V100:4,T4:2",
                 "--global-batch", "1024")

_HEADER = re.compile(r"(\d+) pipeline cop(?:y|ies) x (\d+) micro-batches of (\d+) = "
                     r"(\d+) samples/step")
_STAGE = re.compile(r"stage (\d+)\s+layers\s+(\d+)-(\d+)\s+on\s+(\d+) x (\S+)\s+"
                    r"TP (\d+) x DP (\d+)")
_DEVICES = re.compile(r"stage (\d+) devices: (.+)")
_DP_ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+[\d.]+$")
_DROPPED = re.compile(r"dropped (\d+) x (\S+)")


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)

    @a.callback()
    def _root() -> None:
        """Keep ``plan`` a subcommand."""

    return a


def _run(app: typer.Typer, *args: str) -> str:
    r = CliRunner().invoke(app, ["plan", *args])
    assert r.exit_code == 0, r.output
    return r.output


def _device_count(spec: str) -> int:
    return sum(int(part.split(":")[1]) for part in spec.split(","))


def _expand(ranges: str) -> list[str]:
    """``a:0-3, b:1`` -> ``[a:0, a:1, a:2, a:3, b:1]`` (the text's device ranges)."""
    out: list[str] = []
    for part in ranges.split(", "):
        node, _, idx = part.rpartition(":")
        lo, _, hi = idx.partition("-")
        out += [f"{node}:{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def test_pipeline_text_and_json_agree_with_the_batch_and_the_devices(app: typer.Typer) -> None:
    text = _run(app, *PIPELINE)
    js: dict[str, Any] = json.loads(_run(app, *PIPELINE, "--json"))
    batch, offered = int(PIPELINE[5]), _device_count(PIPELINE[3])

    header = _HEADER.search(text)
    assert header, text
    copies, n_micro, micro, samples = map(int, header.groups())
    assert copies * n_micro * micro == samples == batch == js["global_batch"]
    assert (copies, n_micro, micro) == (js["dp_copies"], js["n_micro"], js["micro_batch"])

    stages = _STAGE.findall(text)
    devices = {int(k): _expand(r) for k, r in _DEVICES.findall(text)}
    assert len(stages) == js["pp_stages"] == len(js["stages"]) == len(devices) >= 1
    used = 0
    for (k, first, last, gpus, flavor, tp, dp), st in zip(stages, js["stages"], strict=True):
        k, gpus, tp, dp = int(k), int(gpus), int(tp), int(dp)
        assert (flavor, int(first), int(last) + 1) == (st["flavor"], st["first_layer"],
                                                       st["end_layer"])
        # GPUs: the text's count = TP x DP = the JSON's per-copy count x copies = its devices
        assert gpus == tp * dp == st["gpus"] * js["dp_copies"] == len(st["devices"])
        assert devices[k] == st["devices"]
        assert (tp, dp) == (st["tp"], st["dp"])
        # samples: each tensor-parallel group's local batches add up to the global batch
        ranks = [r for r in js["ranks"] if r["stage"] == k]
        assert len(ranks) == gpus and {r["dp_size"] for r in ranks} == {dp}
        assert sum(r["local_batch"] for r in ranks if r["tp_rank"] == 0) == batch
        used += gpus
    dropped = sum(d["count"] for d in js["dropped"])
    assert dropped == sum(int(n) for n, _ in _DROPPED.findall(text))
    assert used + dropped == offered == len(js["ranks"])


def test_data_parallel_text_and_json_agree_with_the_batch_and_the_devices(
        app: typer.Typer) -> None:
    text = _run(app, *DATA_PARALLEL)
    js: dict[str, Any] = json.loads(_run(app, *DATA_PARALLEL, "--json"))
    batch, offered = int(DATA_PARALLEL[5]), _device_count(DATA_PARALLEL[3])

    rows = [m.groups() for line in text.splitlines() if (m := _DP_ROW.match(line))]
    text_dropped = sum(int(n) for n, _ in _DROPPED.findall(text))
    used_json = [d for d in js["devices"] if d["local_batch"] > 0]
    assert [(f, n, int(b), int(s)) for f, n, b, s in rows] == [
        (d["flavor"], d["node"], d["local_batch"], d["micro_steps"]) for d in used_json]
    assert sum(int(b) for _, _, b, _ in rows) == batch == js["global_batch"]
    assert len(rows) + text_dropped == len(js["devices"]) == offered
    assert text_dropped == sum(d["count"] for d in js["dropped"])
    assert f"global batch {batch}" in text
