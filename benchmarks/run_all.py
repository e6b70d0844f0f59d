"""Run every benchmark in this folder, one after another, printing each one's table.

    .venv/bin/python benchmarks/run_all.py [--quick]

``--quick`` passes each benchmark's small-size options where it has them. The benchmarks are
independent scripts; this only sequences them and reports each one's wall time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK = {
    "bench_sim.py": ["--limit", "20000"],
    "bench_decide.py": ["--sizes", "64,512,2048"],
    "bench_full_philly.py": ["--limit", "20000"],
    "bench_mixed.py": ["--quick"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="pass each benchmark its small-size options where it has them")
    quick = ap.parse_args().quick
    failed = 0
    for script in sorted(HERE.glob("bench_*.py")):
        args = QUICK.get(script.name, []) if quick else []
        print(f"\n=== {script.name} {' '.join(args)}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script), *args])
        print(f"=== {script.name}: exit {rc}, {time.perf_counter() - t0:.0f} s", flush=True)
        failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
