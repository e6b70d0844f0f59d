"""``tessera simulate --json`` with ``max_min_fairness:settle=ridge`` stays valid JSON.

The second stage runs HiGHS' QP solver (``LpSolver.set_hessian``), C code that writes to file
descriptor 1 directly when its output is on: ``capfd`` reads that descriptor, so a solver
line on stdout -- a banner, an iteration log, the QP iteration cap's warning -- breaks
``json.loads`` here (``capsys`` would not see it). Both ways the stage can end are run: a
QP that reaches its optimum, and one stopped at its iteration cap (the fallback note).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.sched.gavel import maxmin_settle
from tests.cli.runner import run_tessera

POLICY = "max_min_fairness:settle=ridge"


@pytest.mark.parametrize("stalled", [False, True])
def test_settle_ridge_prints_only_json(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, stalled: bool) -> None:
    trace = tmp_path / "g.trace"
    code, _out, err = run_tessera(["traces", "generate", "--out", str(trace), "--jobs", "20",
                                "--jobs-per-hour", "20", "--seed", "0"], capfd, monkeypatch)
    assert code == 0, err
    if stalled:  # every QP stops at its cap: the first stage's vertex, with a note
        monkeypatch.setattr(maxmin_settle, "QP_ITERATIONS_PER_COLUMN", 0)
    calls: list[int] = []
    real = maxmin_settle._hessian
    monkeypatch.setattr(maxmin_settle, "_hessian",
                        lambda *a: calls.append(1) or real(*a))
    code, out, err = run_tessera(["simulate", "-t", str(trace), "-c", "v100:4,p100:4,k80:4",
                               "-p", POLICY, "--no-plots", "--json",
                               "--out", str(tmp_path / "out")], capfd, monkeypatch)
    assert code == 0, err
    assert calls  # (the QP did run)
    notes = json.loads(out)["results"][POLICY]["notes"]
    stuck = [n for n in notes if "the second stage found no optimum" in n]
    assert bool(stuck) is stalled
