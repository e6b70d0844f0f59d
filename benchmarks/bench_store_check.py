"""What the job store's start check costs: ``integrity_check`` against ``quick_check``.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_store_check.py [--jobs N]``

Builds a store of N jobs the way the service does (``build_service``, then the jobs in
batches of 100 through ``store_jobs``, each with a few ``env`` values and a command of a few
hundred characters), then times, on that file: SQLite's ``PRAGMA integrity_check``, its
``PRAGMA quick_check`` (which skips the index-content checks), and the whole start check
``open_store`` (files, the check, identity and job count), best of three. ``tessera serve``
runs ``integrity_check``; this shows what that costs at start. Also timed: ``tessera admin
backup`` of the same store.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from tessera.live.backup import backup
from tessera.live.server import ServeConfig, build_service
from tessera.live.spec import parse_request
from tessera.live.storecheck import open_store
from tessera.live.tenancy import Principal

ADMIN = Principal("admin", None)


def build(state: Path, jobs: int) -> None:
    svc, _ = build_service(ServeConfig(state, "v100:4", 4))
    env = "\n".join(f"  VAR_{i}: value-{i}-{'x' * 40}" for i in range(5))
    req = parse_request(f"name: bench\nqueue: default\ngpus: 1\ncommand: echo {'y' * 300}\n"
                        f"env:\n{env}\n")
    for start in range(0, jobs, 100):
        svc.store_jobs([svc.admit(req, ADMIN) for _ in range(min(100, jobs - start))])
    svc.stop()
    svc.store.close()


def best_s(fn: object, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    jobs = ap.parse_args().jobs
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        t0 = time.perf_counter()
        build(state, jobs)
        db_path = state / "state.db"
        size = db_path.stat().st_size
        print(f"store: {jobs} jobs, {size / 2**20:.1f} MiB (built in "
              f"{time.perf_counter() - t0:.1f} s)")
        for pragma in ("integrity_check", "quick_check"):
            def check(p: str = pragma) -> None:
                db = sqlite3.connect(db_path)
                assert db.execute(f"PRAGMA {p}").fetchall() == [("ok",)]
                db.close()
            print(f"PRAGMA {pragma}: {best_s(check) * 1000:.0f} ms")
        print(f"open_store (integrity_check): "
              f"{best_s(lambda: open_store(db_path, say=print).close()) * 1000:.0f} ms")
        n = iter(range(100))
        print(f"admin backup: "
              f"{best_s(lambda: backup(state, Path(tmp) / f'b{next(n)}.db')) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
