"""``benchmarks/gpu_power_check.py`` (issue 34, part 5: the GPU check of live power), run as a
script against a fake ``pynvml`` (``tests/live/data/fake_pynvml``) first on ``PYTHONPATH`` --
so the script, the product's ``GpuPower`` inside it and its crash child all load the fake, as
they would load ``nvidia-ml-py`` on a GPU machine. No GPU is needed; PyTorch (CPU) sees no CUDA,
so the load step is skipped and the GPU "idles" for ``--load-s``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_power_check.py"
FAKE = Path(__file__).resolve().parent / "data" / "fake_pynvml"
LOAD_S = 2.0


def _boards(path: Path, **faults: Any) -> None:
    """Two fake boards: 100-300 W, limit 250 W, drawing 180 W (below any limit the check
    picks: 150 W caps them at 150 W), plus ``faults`` (see the fake's docstring)."""
    path.write_text(json.dumps({
        "limit_mw": {"0": 250_000, "1": 250_000},
        "energy_mj": {"0": 1_000_000.0, "1": 1_000_000.0},
        "t_s": time.time(), "draw_mw": 180_000, "over": 1.0, "skew": 1.0,
        "may_set": True, "counters": True, "absent": False, "fail_set_to_mw": None,
        "import_error": False, "sets": [], **faults}))


def _check(tmp_path: Path, *args: str, **faults: Any) -> tuple[int, str, dict[str, Any]]:
    """Run the script over fresh fake boards; (exit status, output, the boards after)."""
    state = tmp_path / "boards.json"
    _boards(state, **faults)
    env = {**os.environ, "FAKE_PYNVML_STATE": str(state),
           "PYTHONPATH": os.pathsep.join([str(FAKE), str(ROOT / "src"), str(ROOT)])}
    env["CUDA_VISIBLE_DEVICES"] = ""  # (no real GPU under the fake boards, even on a GPU host)
    # (2 s of "load": the energy steps compare the counters over begin..end with the samples'
    # integral over the same run, and on a busy machine either edge may lag tens of ms)
    done = subprocess.run([sys.executable, str(SCRIPT), "--load-s", str(LOAD_S), *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    return done.returncode, done.stdout + done.stderr, json.loads(state.read_text())


def _line(out: str, step: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(step + ":"))


def test_without_nvml_or_a_gpu_it_says_so_and_exits_0(tmp_path: Path) -> None:
    rc, out, _ = _check(tmp_path, absent=True)
    assert rc == 0 and out.strip() == "no GPU to check: NVMLError: Driver Not Loaded"
    rc, out, _ = _check(tmp_path, import_error=True)
    assert rc == 0 and out.strip() == "no GPU to check: nvidia-ml-py is not installed"


def test_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    rc, out, _ = _check(tmp_path, "--load-s", "-1")
    assert rc == 2 and out.strip().splitlines()[-1].endswith(
        "error: --load-s -1.0 is not a number of seconds >= 0")
    rc, out, boards = _check(tmp_path, "--gpu", "7")
    assert rc == 2 and out.strip().splitlines()[-1].endswith(
        "error: --gpu 7: NVML counts 2 GPUs")
    assert boards["sets"] == []


def test_every_step_passes_on_good_boards_and_the_json_says_so(tmp_path: Path) -> None:
    rc, out, boards = _check(tmp_path, "--json")
    assert rc == 0, out
    summary = json.loads(out[:out.index("\n}") + 2])  # stdout first: the JSON, then stderr
    assert summary["ok"] is True
    steps = {s["step"]: s["status"] for s in summary["steps"]}
    assert steps == {"limit set": "ok", "limit reads back": "ok", "load": "skipped",
                     "power sampled": "ok", "limit restored": "ok",
                     "energy matches the sampled power": "ok", "power under the limit": "ok",
                     "crash leaves the limit set": "ok", "recover restores the limit": "ok",
                     "limit as found": "ok"}
    assert summary["figures"]["limit_w"] == 150.0  # 100 W + a quarter of 100-300 W
    assert abs(summary["figures"]["energy_ratio"] - 1) < 0.15
    assert [g["model"] for g in summary["gpus"]] == ["Fake GPU 80GB"] * 2
    assert "GPU 0 Fake GPU 80GB: limit range 100-300 W, limit now 250 W, energy counter yes" \
        in out
    assert _line(out, "load").startswith("load: skipped: ")
    # the run set 150 W and GpuPower.end put 250 W back; the crash child set 150 W, died,
    # and GpuPower.recover() put 250 W back; GPU 1 was never touched
    assert boards["sets"] == [[0, 150_000], [0, 250_000], [0, 150_000], [0, 250_000]]
    assert boards["limit_mw"] == {"0": 250_000, "1": 250_000}
    assert "GPU 0 250 W" in _line(out, "recover restores the limit")


def test_a_restore_that_fails_is_named_and_exits_1(tmp_path: Path) -> None:
    rc, out, boards = _check(tmp_path, fail_set_to_mw=250_000)
    assert rc == 1
    assert _line(out, "limit restored").startswith("limit restored: FAILED (150 W now, 250 W "
                                                   "before; power limit NOT restored on GPU 0")
    assert "FAILED" in _line(out, "limit as found")
    assert "set it with nvidia-smi -pl" in _line(out, "limit as found")
    assert out.rstrip().splitlines()[-1].startswith("FAILED: limit restored")
    assert boards["limit_mw"]["0"] == 150_000  # (the fake refuses every way back)


def test_not_permitted_checks_only_the_energy(tmp_path: Path) -> None:
    rc, out, boards = _check(tmp_path, may_set=False)
    assert rc == 0, out
    assert _line(out, "limit set").startswith("limit set: skipped: setting a limit is not "
                                              "permitted")
    for step in ("limit reads back", "power under the limit", "crash leaves the limit set",
                 "recover restores the limit"):
        assert "skipped" in _line(out, step)
    assert _line(out, "energy matches the sampled power").startswith(
        "energy matches the sampled power: ok")
    assert boards["sets"] == [] and boards["limit_mw"]["0"] == 250_000


def test_energy_off_by_more_than_15_percent_and_power_over_the_limit_fail(
        tmp_path: Path) -> None:
    rc, out, _ = _check(tmp_path, skew=1.3, over=1.1)
    assert rc == 1
    energy = _line(out, "energy matches the sampled power")
    assert energy.startswith("energy matches the sampled power: FAILED")
    assert 1.2 < float(energy.split("ratio ")[1].split()[0]) < 1.4  # the 1.3 skew, said
    assert _line(out, "power under the limit").startswith(
        "power under the limit: FAILED (max 165 W under a 150 W limit")
    assert _line(out, "recover restores the limit").startswith("recover restores the limit: ok")
