"""Wall time of Zeus's optimiser on the full bundled table (issue 34: "well under a second").

Three rows, best of ``--repeat``: reading the five CSV files into typed rows (cold, cache
cleared); Zeus's choice (JIT limit per batch, then the cheapest batch) for every GPU x workload
x η in {0, 0.25, 0.5, 0.75, 1} (120 decisions); the exhaustive search over the same; and one
whole recurring job (2 x |B| x |P| recurrences of JIT profiling + bandit) per GPU x workload
at η = 0.5. Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_zeus.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from tessera.perf.zeus_opt import exhaustive_best, simulate_recurring, zeus_choice
from tessera.perf.zeus_table import WORKLOADS, ZEUS_GPUS, ZeusTable, train_rows

ETAS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _load() -> None:
    ZeusTable.load.cache_clear()
    train_rows.cache_clear()
    for g in ZEUS_GPUS:
        ZeusTable.load(g)


def _each(fn: Callable[[ZeusTable, object, float], object], etas: tuple[float, ...]) -> int:
    n = 0
    for g in ZEUS_GPUS:
        t = ZeusTable.load(g)
        for w in WORKLOADS:
            for eta in etas:
                fn(t, w, eta)
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    cases: list[tuple[str, Callable[[], object]]] = [
        ("read tables (cold)", _load),
        ("zeus choice, 120 decisions", lambda: _each(zeus_choice, ETAS)),  # type: ignore[arg-type]
        ("exhaustive, 120 searches", lambda: _each(exhaustive_best, ETAS)),  # type: ignore[arg-type]
        ("recurring jobs, 24 x 2|B||P|",
         lambda: _each(lambda t, w, e: simulate_recurring(t, w, e), (0.5,))),  # type: ignore[arg-type]
    ]
    for name, fn in cases:
        best = min(_timed(fn) for _ in range(a.repeat))
        print(f"{name:32} {best * 1000:9.1f} ms")


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
