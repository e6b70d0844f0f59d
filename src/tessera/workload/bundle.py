"""How the bundled Philly slice (``tessera/data/workloads/philly_slice.csv``) is made.

The slice is a pure function of the public table, so it can be rebuilt and checked::

    python -m tessera.workload.bundle ../shared/data/traces/philly/philly_jobs_pollux.csv \\
        src/tessera/data/workloads/philly_slice.csv

Rule: keep the rows submitted in ``[2017-11-27 00:00:00, 2017-12-04 00:00:00)`` (one week, Monday
to Monday) that pass Pollux/Sia's sampling filter -- ``duration >= 60`` s and
``gpu_time < 1000`` GPU-hours -- sorted by submit time (stable). Each row gains a ``job_id``
column, ``philly-<n>`` with ``n`` the row's 0-based index in the full table, so a job has the same
id in ``philly`` and ``philly-full``. Values are copied verbatim.
"""

from __future__ import annotations

import csv
import sys
from datetime import datetime
from pathlib import Path

SLICE_START = datetime(2017, 11, 27)
SLICE_END = datetime(2017, 12, 4)
MIN_DURATION_S = 60.0
MAX_GPU_TIME_S = 1000 * 3600.0


def make_philly_slice(
    source: Path, dest: Path, start: datetime = SLICE_START, end: datetime = SLICE_END
) -> int:
    """Write the slice of ``source`` described in the module docstring; return its row count."""
    kept: list[tuple[datetime, int, list[str]]] = []
    with source.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader)]
        col = {name: i for i, name in enumerate(header)}
        index = 0
        for row in reader:
            if not row:
                continue
            stamp = datetime.fromisoformat(row[col["timestamp"]])
            if (
                start <= stamp < end
                and float(row[col["duration"]]) >= MIN_DURATION_S
                and float(row[col["gpu_time"]]) < MAX_GPU_TIME_S
            ):
                kept.append((stamp, index, row))
            index += 1
    kept.sort(key=lambda item: item[0])
    with dest.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["job_id", *header])
        for _stamp, index, row in kept:
            writer.writerow([f"philly-{index:06d}", *row])
    return len(kept)


if __name__ == "__main__":  # pragma: no cover - maintenance script
    n = make_philly_slice(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"wrote {n} jobs to {sys.argv[2]}")
