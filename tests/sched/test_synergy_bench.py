"""Issue 33, part 3: the reproduction runs as Synergy's runner measures.

Synergy's runner keeps drawing jobs until every measured job (ids 4000-4999) has finished; a
fixed stream that ends earlier lets the last measured jobs finish on an emptying cluster.
``benchmarks/bench_synergy.py`` checks that its stream outlasts them and draws more if not.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tessera.model.cluster import load_cluster
from tessera.sim.engine import simulate
from tessera.workload.synergy import generate_synergy_like

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_synergy.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_synergy", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_stream_that_ends_before_the_measured_jobs_finish_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    monkeypatch.setattr(bench, "MEASURED", (20, 40))
    cluster = load_cluster("synergy-128")
    short = generate_synergy_like(40, 9, 0)  # the last measured job is the last to arrive
    assert not bench.outlasts(short, simulate(short, cluster, "fifo:resources=tune"))
    long = generate_synergy_like(2000, 9, 0)  # arrivals go on 222 h, past any job (<= 167 h)
    assert bench.outlasts(long, simulate(long, cluster, "fifo:resources=tune"))
