"""Hand computations from the Sia/Pollux CSV files, written independently of ``tessera.perf``.

Each helper reads the raw files with the csv module and follows the published definitions step
by step, so tests can compare Tessera's code path with them.
"""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "src" / "tessera" / "data" / "sia"
SHARED = REPO.parent / "shared" / "data" / "profiles" / "sia"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def last_iteration(root: Path, model: str, batch: int) -> int:
    """Steps the run at ``batch`` took to the end of its validation curve."""
    return int(float(rows(root / model / f"validation-{batch}.csv")[-1]["iteration"]))


def step_sync(root: Path, model: str, suffix: str, servers: list[int],
              local: float) -> tuple[float, float]:
    """Step and sync time at a placement (servers in any order) and a local batch: the mean
    of the rows measured at each local batch, linear between the two around ``local``."""
    want = sorted(servers)
    by_b: dict[int, list[tuple[float, float]]] = {}
    for r in rows(root / model / f"placements-{suffix}.csv"):
        if sorted(int(c) for c in r["placement"]) == want and float(r["step_time"]) > 0:
            by_b.setdefault(int(r["local_bsz"]), []).append(
                (float(r["step_time"]), float(r["sync_time"])))
    pts = sorted((b, sum(s for s, _ in v) / len(v), sum(y for _, y in v) / len(v))
                 for b, v in by_b.items())
    for (b0, s0, y0), (b1, s1, y1) in itertools.pairwise(pts):
        if b0 <= local <= b1:
            f = (local - b0) / (b1 - b0)
            return s0 + f * (s1 - s0), y0 + f * (y1 - y0)
    if pts and pts[0][0] == local:
        return pts[0][1], pts[0][2]
    raise ValueError(f"local batch {local} not bracketed at placement {servers}")


def max_local(root: Path, model: str, suffix: str, servers: list[int]) -> int:
    want = sorted(servers)
    return max(int(r["local_bsz"]) for r in rows(root / model / f"placements-{suffix}.csv")
               if sorted(int(c) for c in r["placement"]) == want)


def rigid_duration_s(root: Path, model: str, num_gpus: int, batch: int,
                     suffix: str = "azure", server_gpus: int = 8) -> float:
    """Sia's model of a rigid job alone: curve steps x iteration time, GPUs packed on servers,
    gradient accumulation when a GPU's share exceeds the largest measured local batch."""
    servers = [server_gpus] * (num_gpus // server_gpus)
    if num_gpus % server_gpus:
        servers.append(num_gpus % server_gpus)
    passes = math.ceil(batch / (num_gpus * max_local(root, model, suffix, servers)))
    step, sync = step_sync(root, model, suffix, servers, batch / (num_gpus * passes))
    return last_iteration(root, model, batch) * (passes * (step - sync) + sync)
