"""Wall time of the speed estimator (issue 35): a new job type's completion, a round's update.

Prints, best of ``--repeat`` runs, for Gavel's and Sia's tables:

* ``complete table``: the log-space completion of the whole table with the new job's row in
  it (what Gavel does per new job type; goal <= 50 ms);
* ``fit new row``: one new job's row against the completed table (what Tessera does);
* ``update N jobs``: :meth:`SpeedBook.update` for ``--jobs`` jobs (default 2,048) with one to
  three observed flavors each, the per-round work (goal <= 10 ms).

Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_speed_estimates.py [--jobs 2048]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from tessera.perf.completion import complete
from tessera.perf.estimate import SpeedBook, SpeedEstimator, table_matrix
from tessera.perf.tables import load_throughputs


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'table':<6} {'shape':>7} {'complete table ms':>18} {'fit new row ms':>15} "
          f"{'update ' + str(args.jobs) + ' jobs ms':>20}")
    for name in ("gavel", "sia"):
        table = load_throughputs(name)
        _types, flavors, logs = table_matrix(table)
        est = SpeedEstimator.from_table(table)
        first = int(np.flatnonzero(~np.isnan(logs[0]))[0])
        seen = {flavors[first]: float(np.exp(logs[0, first]))}
        whole_ms = best_ms(partial(complete, logs), args.repeat)
        row_ms = best_ms(partial(est.estimate, seen), args.repeat)
        book = SpeedBook(est, capacity=args.jobs)
        for j in range(args.jobs):
            cols = rng.choice(len(flavors), size=int(rng.integers(1, 4)), replace=False)
            for c in cols:
                book.observe(f"job-{j}", flavors[int(c)], float(rng.uniform(0.5, 50.0)))
        update_ms = best_ms(book.update, args.repeat)
        shape = f"{logs.shape[0]}x{logs.shape[1]}"
        print(f"{name:<6} {shape:>7} {whole_ms:>18.2f} {row_ms:>15.3f} {update_ms:>20.2f}")


if __name__ == "__main__":
    main()
